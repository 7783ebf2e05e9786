//! A `weir serve` child process for benchmarks that start their own
//! server, and what `/proc` says about it (CPU time, peak memory).
//!
//! Free ports, a temporary data directory, readiness by `/ready` or pgwire,
//! and a stop that always happens: SIGTERM, then SIGKILL after a grace
//! period, on [`Server::stop`] or when the value is dropped on an error path.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

type BoxError = Box<dyn std::error::Error>;

/// How long a server may take to answer `/ready` or a pgwire connect.
const STARTUP: Duration = Duration::from_secs(60);
/// Between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// A `weir serve` child on a temporary data directory; stopped (and the
/// directory removed) on [`Server::stop`] or drop, so an error never leaks
/// a server.
pub struct Server {
    child: Option<Child>,
    dir: tempfile::TempDir,
    pg_port: u16,
    http_port: u16,
}

impl Server {
    /// `workers`: `--workers`, or the server's default when `None`.
    pub fn start(
        weir: &Path,
        barrier_interval: &str,
        workers: Option<u16>,
    ) -> Result<Self, BoxError> {
        let dir = tempfile::Builder::new().prefix("weir-nexmark-").tempdir()?;
        let [pg_port, flight_port, http_port] = free_ports::<3>()?;
        let log = std::fs::File::create(dir.path().join("weir.log"))?;
        let mut command = Command::new(weir);
        if let Some(workers) = workers {
            command.env("WEIR_WORKERS", workers.to_string());
        }
        let child = command
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--pg-addr")
            .arg(format!("127.0.0.1:{pg_port}"))
            .arg("--flight-addr")
            .arg(format!("127.0.0.1:{flight_port}"))
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("--barrier-interval")
            .arg(barrier_interval)
            // The log is a file: no colour codes in it.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{}: {e}", weir.display()))?;
        Ok(Self {
            child: Some(child),
            dir,
            pg_port,
            http_port,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running until stop").id()
    }

    /// Waits until `/ready` answers 200 or pgwire accepts a session, then
    /// returns a session.
    pub async fn wait_ready(&mut self) -> Result<Client, BoxError> {
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Some(status) = self.exited()? {
                return Err(format!(
                    "weir exited ({status}) before it was ready; its log:\n{}",
                    self.log_tail(20)
                )
                .into());
            }
            if http_ready(self.http_port) {
                if let Ok(client) = connect(self.pg_port).await {
                    return Ok(client);
                }
            } else if let Ok(client) = connect(self.pg_port).await {
                return Ok(client);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "weir was not ready after {} s; its log:\n{}",
                    STARTUP.as_secs(),
                    self.log_tail(20)
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn exited(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.as_mut().expect("running until stop").try_wait()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("weir.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, SIGKILL after [`GRACE`], then the data directory goes.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // SAFETY: kill(2) on the pid of a child we have not reaped yet.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn connect(port: u16) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=weir dbname=weir connect_timeout=5"),
        NoTls,
    )
    .await?;
    // The connection ends with an error when the server is stopped; nobody
    // needs to hear about it.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Whether `GET /ready` answers 200. Plain HTTP/1.0 over a socket: one
/// request per poll does not warrant an HTTP client.
fn http_ready(port: u16) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let address: std::net::SocketAddr = (Ipv4Addr::LOCALHOST, port).into();
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(200))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"GET /ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut head = [0u8; 16];
        let n = stream.read(&mut head)?;
        let status = String::from_utf8_lossy(&head[..n]);
        Ok(status.starts_with("HTTP/1.") && status.get(9..12) == Some("200"))
    };
    attempt().unwrap_or(false)
}

/// `N` distinct free TCP ports on 127.0.0.1. All listeners stay open until
/// every port is picked, so the ports differ; another process could still
/// take one before the server binds it, which a retry would fix.
fn free_ports<const N: usize>() -> std::io::Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// User + system CPU seconds of a process so far (all its threads).
pub fn cpu_seconds(pid: u32) -> Result<f64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    cpu_ticks(&stat)
        .map(|ticks| ticks as f64 / clock_ticks_per_second())
        .ok_or_else(|| format!("unreadable /proc/{pid}/stat").into())
}

/// utime + stime of a `/proc/<pid>/stat` line. The command name is in
/// parentheses and may hold spaces or `)`, so fields are counted after the
/// last `)`: state is field 3, utime and stime are fields 14 and 15.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// The process's peak resident set (VmHWM), in bytes.
pub fn peak_rss_bytes(pid: u32) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    vm_hwm_bytes(&status).ok_or_else(|| format!("no VmHWM in /proc/{pid}/status").into())
}

fn vm_hwm_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line["VmHWM:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_and_status_are_read() {
        let stat = "1234 (weir (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert_eq!(
            vm_hwm_bytes("Name:\tweir\nVmPeak:\t  10 kB\nVmHWM:\t    2048 kB\n"),
            Some(2048 * 1024)
        );
        // This process has both.
        let me = std::process::id();
        assert!(cpu_seconds(me).unwrap() >= 0.0);
        assert!(peak_rss_bytes(me).unwrap() > 0);
    }

    #[test]
    fn free_ports_differ() {
        let ports = free_ports::<3>().unwrap();
        assert!(ports.iter().all(|&p| p != 0));
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
    }
}
