//! A real `weir` process for a test: free ports, a temporary data directory,
//! its output captured to a file, `kill -9` and restart on the same data.
//!
//! ```ignore
//! let mut server = WeirServer::start();
//! let client = server.connect().await;
//! server.kill();      // SIGKILL, like a crash
//! server.restart();   // same data dir
//! ```
//!
//! Dropping the server kills it. If the test is panicking, the drop also
//! prints the tail of the server's log and keeps its data directory, so the
//! failure message shows what the server said.

#![allow(dead_code)]

use std::collections::HashSet;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

/// How long a server may take to listen. Generous: CI has 2 cores and the
/// debug binary may be starting while other tests compile or run.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one test may keep a server by default: past this the harness kills
/// it (`kill -9`), so a hung server fails its test instead of hanging CI.
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(300);

/// The marker line `weir serve` logs once every port is bound.
const LISTENING: &str = "weir is listening";

/// The workspace root (the folder holding `sqllogictest/` and `tests/`).
///
/// Read at run time: cargo fingerprints path crates by their path relative
/// to the workspace, so a test binary built in another checkout sharing the
/// target dir may be reused here, and its compile-time path would be stale.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .expect("server/ has a parent")
        .to_path_buf()
}

/// Ports handed out by this test process, so parallel tests never pick the
/// same one between `bind(0)` and the server binding it.
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind an ephemeral port on 127.0.0.1")
            .port();
        let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        if taken.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// Extra flags for `weir serve`.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub args: Vec<String>,
    /// Overrides [`DEFAULT_WATCHDOG`].
    pub watchdog: Option<Duration>,
    /// Return once the server listens, before `/ready` answers 200 (to
    /// watch it recover).
    pub no_wait_ready: bool,
}

impl Options {
    /// Lets the test keep its server for `limit` before the watchdog kills it.
    pub fn watchdog(mut self, limit: Duration) -> Self {
        self.watchdog = Some(limit);
        self
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    /// `--auth scram --superuser-password PW`.
    pub fn scram(self, password: &str) -> Self {
        self.arg("--auth")
            .arg("scram")
            .arg("--superuser-password")
            .arg(password)
    }

    /// `--tls-cert CERT --tls-key KEY`.
    pub fn tls(self, cert: &Path, key: &Path) -> Self {
        self.arg("--tls-cert")
            .arg(cert.to_string_lossy())
            .arg("--tls-key")
            .arg(key.to_string_lossy())
    }
}

pub struct WeirServer {
    child: Option<Child>,
    options: Options,
    /// Holds the data directory and the log; removed on drop unless kept.
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    pub pg_port: u16,
    pub flight_port: u16,
    pub http_port: u16,
    log_path: PathBuf,
    /// How many times the process was started (1 + restarts).
    starts: u32,
    /// The pid of the running process, shared with the watchdog thread. The
    /// child is reaped only after its pid is taken out, under this lock, so the
    /// watchdog never signals a recycled pid.
    pid: Arc<Mutex<Option<u32>>>,
    dropped: Arc<AtomicBool>,
}

impl WeirServer {
    /// Starts `weir serve` with default flags and waits until it listens.
    pub fn start() -> Self {
        Self::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("weir-it-")
            .tempdir()
            .expect("create a temporary directory");
        let dir_path = dir.path().to_path_buf();
        let mut server = WeirServer {
            child: None,
            options,
            log_path: dir_path.join("weir.log"),
            dir: Some(dir),
            dir_path,
            pg_port: 0,
            flight_port: 0,
            http_port: 0,
            starts: 0,
            pid: Arc::new(Mutex::new(None)),
            dropped: Arc::new(AtomicBool::new(false)),
        };
        server.start_watchdog();
        server.launch_with_retries();
        server
    }

    fn start_watchdog(&self) {
        let limit = self.options.watchdog.unwrap_or(DEFAULT_WATCHDOG);
        let (pid, dropped, log_path) = (
            self.pid.clone(),
            self.dropped.clone(),
            self.log_path.clone(),
        );
        std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                if dropped.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let guard = pid.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pid) = *guard {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(&log_path) {
                    use std::io::Write;
                    let _ = writeln!(
                        log,
                        "==== harness watchdog: the test kept weir longer than {limit:?}; killed it ===="
                    );
                }
            }
        });
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir_path.join("data")
    }

    pub fn scratch_dir(&self) -> &Path {
        &self.dir_path
    }

    pub fn pg_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.pg_port))
    }

    /// A libpq-style connection string for user `weir`, database `weir`.
    pub fn conn_str(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=weir dbname=weir connect_timeout=30",
            self.pg_port
        )
    }

    pub fn pg_config(&self) -> tokio_postgres::Config {
        self.conn_str().parse().expect("valid connection string")
    }

    /// Connects as `weir` (trust auth) and spawns the connection task.
    pub async fn connect(&self) -> Client {
        self.try_connect(self.pg_config())
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "connect to weir on port {}: {e:?}\n{}",
                    self.pg_port,
                    self.log_tail()
                )
            })
    }

    pub async fn try_connect(
        &self,
        config: tokio_postgres::Config,
    ) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// SIGKILL (`kill -9`): no shutdown hooks run, like a crash or power loss.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _pid = self.pid.lock().unwrap_or_else(|e| e.into_inner()).take();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data directory (after [`kill`]).
    pub fn restart(&mut self) {
        self.kill();
        self.launch_with_retries();
    }

    /// Waits until `/ready` answers 200: every projection is restored or
    /// rebuilt after a start.
    pub fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let status = crate::http::http_get(self.http_port, "/ready").map(|r| r.status);
            if matches!(status, Ok(200)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "/ready did not answer 200 within {START_TIMEOUT:?} (last: {status:?})"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The whole captured output (stdout and stderr) of every run so far.
    pub fn log(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log_path) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }

    /// The last lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(60);
        format!(
            "---- weir log ({}), last {} lines ----\n{}\n---- end of weir log ----",
            self.log_path.display(),
            lines.len() - from,
            lines[from..].join("\n")
        )
    }

    fn launch_with_retries(&mut self) {
        // Ports are reused on restart (clients keep their addresses); a port
        // taken meanwhile by another process makes us pick new ones.
        let mut fresh_ports = self.pg_port == 0;
        let mut last_error = String::new();
        for _attempt in 0..3 {
            if fresh_ports {
                self.pg_port = free_port();
                self.flight_port = free_port();
                self.http_port = free_port();
            }
            match self.launch() {
                Ok(()) => return,
                Err(e) => {
                    last_error = e;
                    fresh_ports = true;
                }
            }
        }
        panic!("weir did not start: {last_error}\n{}", self.log_tail());
    }

    fn launch(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(self.data_dir()).map_err(|e| format!("create data dir: {e}"))?;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| format!("open {}: {e}", self.log_path.display()))?;
        self.starts += 1;
        {
            use std::io::Write;
            let _ = writeln!(
                log,
                "==== harness: start #{} (pg {}, flight {}, http {}) ====",
                self.starts, self.pg_port, self.flight_port, self.http_port
            );
        }
        let log_offset = log.metadata().map(|m| m.len()).unwrap_or(0);
        let stderr = log
            .try_clone()
            .map_err(|e| format!("clone log handle: {e}"))?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--pg-addr")
            .arg(format!("127.0.0.1:{}", self.pg_port))
            .arg("--flight-addr")
            .arg(format!("127.0.0.1:{}", self.flight_port))
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{}", self.http_port))
            .args(&self.options.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            // No ANSI colours in the captured log.
            .env("NO_COLOR", "1");
        // Two workers whatever the machine's cores (the default is one per
        // core): EXPLAIN expectations name them, and every test then runs
        // keyed operators split over threads.
        if !self.options.args.iter().any(|a| a == "--workers") {
            command.args(["--workers", "2"]);
        }
        // Settings from the environment must not leak into a test server.
        for (key, _) in std::env::vars() {
            if key.starts_with("WEIR_") {
                command.env_remove(key);
            }
        }
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "info");
        }
        let child = command
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", env!("CARGO_BIN_EXE_weir")))?;
        *self.pid.lock().unwrap_or_else(|e| e.into_inner()) = Some(child.id());
        self.child = Some(child);
        self.wait_until_listening(log_offset)?;
        if self.options.no_wait_ready {
            return Ok(());
        }
        self.wait_ready()
    }

    fn wait_until_listening(&mut self, log_offset: u64) -> Result<(), String> {
        let started = Instant::now();
        let deadline = started + START_TIMEOUT;
        loop {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.pid.lock().unwrap_or_else(|e| e.into_inner()).take();
                self.child = None;
                return Err(format!("weir exited with {status} before listening"));
            }
            let log = self.log();
            let this_run = log.get(log_offset as usize..).unwrap_or("");
            if this_run.contains(LISTENING) {
                return Ok(());
            }
            // Fallback in case the log line changes or logging is filtered: after a
            // grace period, every port accepting is taken as listening.
            if started.elapsed() > Duration::from_secs(5)
                && [self.pg_port, self.flight_port, self.http_port]
                    .iter()
                    .all(|p| port_accepts(*p))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!("weir did not listen within {START_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn port_accepts(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

impl Drop for WeirServer {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::Relaxed);
        self.kill();
        if std::thread::panicking() {
            eprintln!("{}", self.log_tail());
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!(
                    "weir data directory kept for inspection: {}",
                    kept.display()
                );
            }
        }
    }
}

/// The SQLSTATE of a tokio-postgres error, or a description of why there is none.
pub fn sqlstate(e: &tokio_postgres::Error) -> String {
    match e.code() {
        Some(code) => code.code().to_string(),
        None => format!("(no SQLSTATE: {e:?})"),
    }
}

/// Polls `f` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs a command with a deadline, returning (exit code, stdout, stderr).
/// Panics with `what` if it cannot start or does not finish in time.
pub fn run_command(
    mut command: Command,
    timeout: Duration,
    what: &str,
) -> (Option<i32>, String, String) {
    let stdout_file = tempfile::NamedTempFile::new().expect("temp file");
    let stderr_file = tempfile::NamedTempFile::new().expect("temp file");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout_file.reopen().expect("reopen")))
        .stderr(Stdio::from(stderr_file.reopen().expect("reopen")));
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {:?}: {e}", command.get_program()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{what}: wait failed: {e}"),
        }
    };
    let read = |f: &tempfile::NamedTempFile| std::fs::read_to_string(f.path()).unwrap_or_default();
    let (out, err) = (read(&stdout_file), read(&stderr_file));
    match status {
        Some(s) => (s.code(), out, err),
        None => panic!("{what}: did not finish within {timeout:?}\nstdout:\n{out}\nstderr:\n{err}"),
    }
}

/// A minimal hand-written pgwire client (trust auth only) for protocol cases a
/// driver will not produce: a Bind with the wrong parameter count, a socket
/// closed in the middle of COPY, the exact reply to an empty query.
pub struct RawPg {
    stream: TcpStream,
}

/// One backend message: its type byte and body.
pub type RawMessage = (u8, Vec<u8>);

impl RawPg {
    /// Connects as `weir` to database `weir` and reads up to ReadyForQuery.
    pub fn connect(port: u16) -> RawPg {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("raw connect to weir");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("set read timeout");
        let mut raw = RawPg { stream };
        let mut body = Vec::new();
        body.extend_from_slice(&196608i32.to_be_bytes()); // protocol 3.0
        for (k, v) in [("user", "weir"), ("database", "weir")] {
            body.extend_from_slice(k.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        packet.extend_from_slice(&body);
        raw.write_all(&packet);
        for (tag, body) in raw.until_ready() {
            match tag {
                b'R' => assert_eq!(
                    &body[..4],
                    &0i32.to_be_bytes(),
                    "RawPg supports trust auth only (AuthenticationOk expected)"
                ),
                b'E' => panic!("raw startup failed: {:?}", error_fields(&body)),
                _ => {}
            }
        }
        raw
    }

    fn write_all(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stream.write_all(bytes).expect("write to weir");
    }

    /// Sends one frontend message.
    pub fn send(&mut self, tag: u8, body: &[u8]) {
        let mut packet = vec![tag];
        packet.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        packet.extend_from_slice(body);
        self.write_all(&packet);
    }

    /// A simple-protocol Query message.
    pub fn query(&mut self, sql: &str) {
        let mut body = sql.as_bytes().to_vec();
        body.push(0);
        self.send(b'Q', &body);
    }

    /// Reads one backend message (panics on timeout or EOF).
    pub fn recv(&mut self) -> RawMessage {
        let mut header = [0u8; 5];
        self.stream
            .read_exact(&mut header)
            .expect("read a message header from weir");
        let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        assert!(len >= 4, "bad message length {len}");
        let mut body = vec![0u8; len - 4];
        self.stream
            .read_exact(&mut body)
            .expect("read a message body from weir");
        (header[0], body)
    }

    /// Reads messages up to and including ReadyForQuery.
    pub fn until_ready(&mut self) -> Vec<RawMessage> {
        let mut messages = Vec::new();
        loop {
            let m = self.recv();
            let done = m.0 == b'Z';
            messages.push(m);
            if done {
                return messages;
            }
        }
    }

    /// Closes the socket abruptly, without a Terminate message.
    pub fn drop_connection(self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// The fields of an ErrorResponse body as (code, value) pairs.
pub fn error_fields(body: &[u8]) -> Vec<(char, String)> {
    body.split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| (f[0] as char, String::from_utf8_lossy(&f[1..]).into_owned()))
        .collect()
}

/// The SQLSTATE field of an ErrorResponse body.
pub fn error_code(body: &[u8]) -> Option<String> {
    error_fields(body)
        .into_iter()
        .find(|(c, _)| *c == 'C')
        .map(|(_, v)| v)
}

/// Message type bytes of a list, as a string such as "TDCZ".
pub fn tags(messages: &[RawMessage]) -> String {
    messages.iter().map(|(t, _)| *t as char).collect()
}

/// Runs `body`, a test (or the part of one) that fails because of a known server
/// gap, as a strict expected failure: the body must panic (fail). It prints
/// `known gap: <reason>` when it does, and panics when the body succeeds, so a
/// fixed gap is noticed and its wrapper removed.
pub async fn known_gap<F: std::future::Future<Output = ()>>(reason: &str, body: F) {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(body).catch_unwind().await {
        Ok(()) => panic!("known gap now passes: {reason}; remove the known_gap wrapper"),
        Err(_) => eprintln!("known gap: {reason}"),
    }
}

/// [`known_gap`] for synchronous tests.
pub fn known_gap_sync<F: FnOnce()>(reason: &str, body: F) {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(()) => panic!("known gap now passes: {reason}; remove the known_gap wrapper"),
        Err(_) => eprintln!("known gap: {reason}"),
    }
}

/// The rows of a simple query, each as its values joined by `|` (NULL as
/// `NULL`), sorted: a result to compare regardless of row order.
pub async fn try_rows(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let mut out: Vec<String> = client
        .simple_query(sql)
        .await?
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            ),
            _ => None,
        })
        .collect();
    out.sort();
    Ok(out)
}
