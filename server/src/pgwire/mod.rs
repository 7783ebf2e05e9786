//! The PostgreSQL wire-protocol front end (ARCHITECTURE §7), on the `pgwire`
//! crate.
//!
//! [`serve`] accepts TCP connections and runs each in its own task with its
//! own [`Conn`]: the connection's [`Session`] (created once startup and
//! authentication succeed) plus the state of an in-progress `COPY FROM
//! STDIN`. `Conn` implements every pgwire handler trait:
//!
//! - `auth`: startup, trust or SCRAM-SHA-256 authentication, cancel requests;
//! - `simple`: simple-protocol query strings, one result per statement;
//! - `extended`: Parse / Bind / Describe / Execute / Sync;
//! - `copy`: the COPY sub-protocol in both directions, with the line formats
//!   in `weir_pgsem::copy_format` and the binary format in [`copy_binary`];
//! - `encode` and `params`: Arrow rows to `DataRow`s, bound values to
//!   `ScalarValue`s.
//!
//! The message loop here replaces `pgwire::tokio::process_socket` so that
//! message lengths are checked by [`frames::FrameGuard`] before pgwire's
//! decoder sees them, protocol violations get a FATAL ErrorResponse, and
//! shutdown closes idle connections.

mod array_params;
mod auth;
mod copy;
pub mod copy_binary;
mod corked;
mod encode;
mod errors;
mod extended;
mod frames;
#[cfg(test)]
mod fuzz;
mod params;
#[cfg(test)]
mod raw_tests;
mod simple;
#[cfg(test)]
mod tests;
mod tls;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, SinkExt, StreamExt};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::TlsAcceptor;
use pgwire::tokio::server::{
    MaybeTls, PgWireMessageServerCodec, negotiate_tls, process_error, process_message,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{MappedMutexGuard, MutexGuard};
use tokio::task::JoinSet;
use tokio_util::codec::{Framed, FramedParts};
use tokio_util::sync::CancellationToken;

pub use weir_pgsem::copy_format::decode_copy;

use crate::db::Database;
use crate::session::api::PreparedStatement;
use crate::session::{Session, TxnStatus};

/// A client must finish startup and authentication within this time.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long shutdown waits for connection tasks to wind down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

type Socket = Framed<
    corked::Corked<frames::FrameGuard<MaybeTls>>,
    PgWireMessageServerCodec<PreparedStatement>,
>;

/// Serves the PostgreSQL protocol on `listener` until `shutdown` fires.
///
/// Each connection runs in its own task, so a panic or error in one never
/// reaches the others. On shutdown idle connections get a FATAL
/// `57P01` and busy ones are dropped; this returns once they are gone (or
/// after a short grace period). Fails only if the TLS configuration cannot
/// be loaded.
pub async fn serve(
    db: Arc<Database>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let tls = tls::acceptor(db.config())?;
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                log_task_end(joined);
            }
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    // Replies go out whole ([`corked`]), so Nagle's delay
                    // would only hold back the last segment of each.
                    if let Err(e) = socket.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY not set");
                    }
                    let task = connection_task(db.clone(), socket, tls.clone(), shutdown.clone());
                    connections.spawn(async move {
                        tracing::debug!(%peer, "pgwire connection accepted");
                        task.await;
                    });
                }
                Err(e) => {
                    // Usually a transient per-connection failure or fd
                    // exhaustion; back off briefly instead of spinning.
                    tracing::warn!(error = %e, "pgwire accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    let drain = async {
        while let Some(joined) = connections.join_next().await {
            log_task_end(joined);
        }
    };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        connections.abort_all();
    }
    Ok(())
}

fn log_task_end(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined
        && e.is_panic()
    {
        tracing::error!(error = %e, "pgwire connection task panicked");
    }
}

async fn connection_task(
    db: Arc<Database>,
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
) {
    let _open = OpenConnection::new(db.clone());
    let conn = Arc::new(Conn::new(db));
    tokio::select! {
        // A busy connection is simply dropped; an idle one is told why in
        // `run_connection`.
        _ = async { shutdown.cancelled().await; tokio::time::sleep(Duration::from_millis(100)).await } => {}
        result = run_connection(conn, socket, tls, &shutdown) => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "pgwire connection ended with an I/O error");
            }
        }
    }
}

/// Counts the connection as open for as long as it lives, panics included.
struct OpenConnection(Arc<Database>);

impl OpenConnection {
    fn new(db: Arc<Database>) -> Self {
        db.metrics().connection_opened();
        OpenConnection(db)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.metrics().connection_closed();
    }
}

async fn run_connection(
    conn: Arc<Conn>,
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    shutdown: &CancellationToken,
) -> io::Result<()> {
    let startup_deadline = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_deadline);
    let negotiated = tokio::select! {
        _ = &mut startup_deadline => return Ok(()),
        negotiated = negotiate_tls::<PreparedStatement>(tcp, tls) => negotiated?,
    };
    // `None`: a direct-TLS client while TLS is off.
    let Some(framed) = negotiated else {
        return Ok(());
    };
    let mut socket = match guard_frames(framed) {
        Ok(socket) => socket,
        Err(refused) => {
            let (mut unguarded, reason) = *refused;
            let _ = send_fatal(
                &mut unguarded,
                "08P01",
                &format!("invalid frontend message: {reason}"),
            )
            .await;
            return Ok(());
        }
    };

    loop {
        let in_startup = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        // A message the client already sent is taken at once; before
        // waiting for one, everything said so far goes out.
        let ready = socket.next().now_or_never();
        let next = match ready {
            Some(next) => next,
            None => {
                flush_now(&mut socket).await?;
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => {
                        let _ = send_fatal_corked(&mut socket, "57P01", "terminating connection due to administrator command").await;
                        return Ok(());
                    }
                    _ = &mut startup_deadline, if in_startup => {
                        let _ = send_fatal_corked(&mut socket, "08006", "timeout expired during startup").await;
                        return Ok(());
                    }
                    next = socket.next() => next,
                }
            }
        };
        let message = match next {
            None => return Ok(()),
            Some(Err(e)) => {
                tracing::debug!(error = %e, "pgwire protocol violation");
                let _ = send_fatal_corked(
                    &mut socket,
                    "08P01",
                    &format!("invalid frontend message: {e}"),
                )
                .await;
                return Ok(());
            }
            Some(Ok(PgWireFrontendMessage::Terminate(_))) => {
                return flush_now(&mut socket).await;
            }
            Some(Ok(message)) => message,
        };
        // As in PostgreSQL, replies go out at the end of each cycle (its
        // ReadyForQuery) or when the client asks, whatever follows.
        let ends_cycle = matches!(
            message,
            PgWireFrontendMessage::Query(_)
                | PgWireFrontendMessage::Sync(_)
                | PgWireFrontendMessage::Flush(_)
                | PgWireFrontendMessage::CopyDone(_)
                | PgWireFrontendMessage::CopyFail(_)
        );
        let is_cancel = matches!(message, PgWireFrontendMessage::CancelRequest(_));
        let extended = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        let handler = conn.clone();
        let result = process_message(
            message,
            &mut socket,
            handler.clone(),
            handler.clone(),
            handler.clone(),
            handler.clone(),
            handler,
        )
        .await;
        if is_cancel {
            return Ok(());
        }
        if let Err(e) = result {
            let info = errors::normalize(e);
            let fatal = info.is_fatal();
            // An error outside statement execution (a bad Bind, an unknown
            // portal) aborts the open transaction block, as in PostgreSQL.
            if !fatal && let Some(session) = conn.session.lock().await.as_mut() {
                session.fail_transaction();
            }
            process_error(
                &mut socket,
                PgWireError::UserError(Box::new(info)),
                extended,
            )
            .await?;
            if fatal {
                return flush_now(&mut socket).await;
            }
        }
        if ends_cycle {
            flush_now(&mut socket).await?;
        }
    }
}

type Unguarded = Framed<MaybeTls, PgWireMessageServerCodec<PreparedStatement>>;

/// Puts a [`frames::FrameGuard`] under the negotiated socket. What
/// negotiation already buffered is checked first: it goes straight to the
/// decoder, so it is refused as a whole if any of it is malformed.
fn guard_frames(framed: Unguarded) -> Result<Socket, Box<(Unguarded, String)>> {
    let parts = framed.into_parts();
    let mut scanner = frames::FrameScanner::new(frames::MAX_MESSAGE_LEN);
    if let Err(reason) = scanner.feed(&parts.read_buf) {
        return Err(Box::new((Framed::from_parts(parts), reason)));
    }
    let io = corked::Corked::new(frames::FrameGuard::new(parts.io, scanner));
    let mut guarded = FramedParts::new::<PgWireBackendMessage>(io, parts.codec);
    guarded.read_buf = parts.read_buf;
    guarded.write_buf = parts.write_buf;
    Ok(Framed::from_parts(guarded))
}

/// Sends everything written so far ([`corked`]).
async fn flush_now(socket: &mut Socket) -> io::Result<()> {
    socket.get_mut().uncork();
    socket.flush().await?;
    Ok(())
}

/// [`send_fatal`] on the connection's own socket, sent at once: the
/// connection closes next.
async fn send_fatal_corked(socket: &mut Socket, code: &str, message: &str) -> PgWireResult<()> {
    socket.get_mut().uncork();
    send_fatal(socket, code, message).await
}

async fn send_fatal<IO>(
    socket: &mut Framed<IO, PgWireMessageServerCodec<PreparedStatement>>,
    code: &str,
    message: &str,
) -> PgWireResult<()>
where
    IO: tokio::io::AsyncWrite + Unpin,
{
    let info = ErrorInfo::new("FATAL".to_owned(), code.to_owned(), message.to_owned());
    socket
        .send(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    Ok(())
}

/// Per-connection state shared by all handler traits.
pub(crate) struct Conn {
    db: Arc<Database>,
    /// `None` until startup completes.
    session: tokio::sync::Mutex<Option<Session>>,
    auth: tokio::sync::Mutex<auth::AuthState>,
    copy_in: parking_lot::Mutex<Option<copy::CopyInState>>,
}

impl Conn {
    fn new(db: Arc<Database>) -> Self {
        Conn {
            db,
            session: tokio::sync::Mutex::new(None),
            auth: tokio::sync::Mutex::new(auth::AuthState::default()),
            copy_in: parking_lot::Mutex::new(None),
        }
    }

    /// The session, locked; an error if startup has not completed.
    async fn session(&self) -> PgWireResult<MappedMutexGuard<'_, Session>> {
        MutexGuard::try_map(self.session.lock().await, Option::as_mut)
            .map_err(|_| errors::fatal("08P01", "received a query before startup completed"))
    }
}

pub(crate) fn wire_status(status: TxnStatus) -> TransactionStatus {
    match status {
        TxnStatus::Idle => TransactionStatus::Idle,
        TxnStatus::InBlock => TransactionStatus::Transaction,
        TxnStatus::Failed => TransactionStatus::Error,
    }
}

/// Reports the session's transaction status to pgwire's bookkeeping.
pub(crate) fn sync_status<C: ClientInfo>(client: &mut C, session: &Session) -> TransactionStatus {
    let status = wire_status(session.transaction_status());
    client.set_transaction_status(status);
    status
}
