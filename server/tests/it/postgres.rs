//! A throwaway PostgreSQL cluster (initdb + pg_ctl in a temporary directory, a
//! free port, stopped on drop), used to check that the `.slt` files expect
//! what PostgreSQL itself returns. As root, the server runs as the `postgres`
//! user (initdb refuses root).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::harness::{free_port, run_command};

pub struct PgCluster {
    bin: PathBuf,
    dir: Option<tempfile::TempDir>,
    pub port: u16,
}

/// The newest `/usr/lib/postgresql/N/bin` that has initdb.
fn find_bin() -> PathBuf {
    let mut candidates: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
                    let bin = e.path().join("bin");
                    bin.join("initdb").exists().then_some((version, bin))
                })
                .collect()
        })
        .unwrap_or_default();
    candidates.sort();
    candidates.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "PostgreSQL server binaries not found under /usr/lib/postgresql: run scripts/test-all.sh, \
             or `apt-get install -y postgresql`"
        )
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl PgCluster {
    pub fn start() -> PgCluster {
        let bin = find_bin();
        let dir = tempfile::Builder::new()
            .prefix("weir-pg-")
            .tempdir()
            .expect("temp dir");
        let root = is_root();
        let data = dir.path().join("db");
        let port = free_port();
        if root {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
                .expect("open the temp dir to the postgres user");
        }
        let mut initdb = as_postgres(&bin.join("initdb"));
        initdb
            .args([
                "-N",
                "-A",
                "trust",
                "-U",
                "weir",
                "-E",
                "UTF8",
                "--no-locale",
                "-D",
            ])
            .arg(&data);
        let (code, out, err) = run_command(initdb, Duration::from_secs(120), "initdb");
        assert_eq!(code, Some(0), "initdb failed\n{out}\n{err}");

        pg_ctl_start(&bin, dir.path(), port);

        let mut psql = Command::new("psql");
        psql.args([
            "-X",
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "weir",
            "postgres",
        ])
        .args(["-c", "CREATE DATABASE weir"]);
        let (code, out, err) = run_command(psql, Duration::from_secs(60), "CREATE DATABASE weir");
        assert_eq!(code, Some(0), "CREATE DATABASE weir failed\n{out}\n{err}");
        PgCluster {
            bin,
            dir: Some(dir),
            port,
        }
    }
}

/// Starts the cluster in `dir` (its `db` data directory) on `port`.
fn pg_ctl_start(bin: &Path, dir: &Path, port: u16) {
    let mut pg_ctl = as_postgres(&bin.join("pg_ctl"));
    pg_ctl
        .args(["-w", "-t", "60", "-D"])
        .arg(dir.join("db"))
        .arg("-l")
        .arg(dir.join("postgres.log"))
        .arg("-o")
        .arg(format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c timezone=UTC -c datestyle='iso, mdy' -c wal_level=logical",
            dir.display()
        ))
        .arg("start");
    let (code, out, err) = run_command(pg_ctl, Duration::from_secs(120), "pg_ctl start");
    let log = std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default();
    assert_eq!(code, Some(0), "pg_ctl start failed\n{out}\n{err}\n{log}");
}

/// `program` run as the cluster's owner: `postgres` when the tests run as
/// root (PostgreSQL refuses to run as root).
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "postgres",
            "--regid",
            "postgres",
            "--clear-groups",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl PgCluster {
    /// Stops the server at once, as a crash would (`pg_ctl stop -m
    /// immediate`); [`Self::start_again`] brings it back.
    pub fn stop(&self) {
        let dir = self.dir.as_ref().expect("running").path();
        let mut command = as_postgres(&self.bin.join("pg_ctl"));
        command
            .args(["-m", "immediate", "-w", "-D"])
            .arg(dir.join("db"))
            .arg("stop");
        let (code, out, err) = run_command(command, Duration::from_secs(60), "pg_ctl stop");
        assert_eq!(code, Some(0), "pg_ctl stop failed\n{out}\n{err}");
    }

    /// Starts the stopped server again on its port.
    pub fn start_again(&self) {
        pg_ctl_start(
            &self.bin,
            self.dir.as_ref().expect("running").path(),
            self.port,
        );
    }

    /// A libpq connection string for database `weir` as user `weir`.
    pub fn dsn(&self) -> String {
        format!("host=127.0.0.1 port={} user=weir dbname=weir", self.port)
    }

    /// From now on, every user but `weir` must give its password over TCP
    /// (SCRAM), replication connections included; `weir` stays trusted.
    pub async fn require_passwords(&self) {
        self.set_hba(
            "host all all 127.0.0.1/32 scram-sha-256\n\
             host replication all 127.0.0.1/32 scram-sha-256\n",
        )
        .await;
    }

    /// Replaces the client authentication rules with `rules` after the
    /// ones that keep `weir` trusted (locally and over TCP), and reloads.
    pub async fn set_hba(&self, rules: &str) {
        let dir = self.dir.as_ref().expect("running").path().join("db");
        std::fs::write(
            dir.join("pg_hba.conf"),
            format!(
                "local all all trust\n\
                 host all weir 127.0.0.1/32 trust\n\
                 host replication weir 127.0.0.1/32 trust\n{rules}"
            ),
        )
        .expect("write pg_hba.conf");
        self.connect()
            .await
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .expect("reload pg_hba.conf");
    }

    /// Turns TLS on with a self-signed certificate for 127.0.0.1 and
    /// localhost; returns the certificate (a root for `sslrootcert`).
    pub async fn enable_tls(&self) -> PathBuf {
        let dir = self.dir.as_ref().expect("running").path().join("db");
        let (cert, key) = crate::tls::self_signed(&dir);
        if is_root() {
            let mut chown = Command::new("chown");
            chown.arg("postgres:postgres").arg(&cert).arg(&key);
            let (code, out, err) = run_command(chown, Duration::from_secs(10), "chown");
            assert_eq!(code, Some(0), "{out}{err}");
        }
        let client = self.connect().await;
        // One at a time: ALTER SYSTEM refuses a transaction block.
        for sql in [
            format!("ALTER SYSTEM SET ssl_cert_file = '{}'", cert.display()),
            format!("ALTER SYSTEM SET ssl_key_file = '{}'", key.display()),
            "ALTER SYSTEM SET ssl = on".to_string(),
            "SELECT pg_reload_conf()".to_string(),
        ] {
            client.batch_execute(&sql).await.expect("ssl settings");
        }
        cert
    }

    /// Accepts client certificates signed by `ca` (for `cert`
    /// authentication in pg_hba.conf).
    pub async fn trust_client_certificates_of(&self, ca: &Path) {
        let copy = self
            .dir
            .as_ref()
            .expect("running")
            .path()
            .join("db/client_ca.crt");
        std::fs::copy(ca, &copy).expect("copy the CA certificate");
        if is_root() {
            let mut chown = Command::new("chown");
            chown.arg("postgres:postgres").arg(&copy);
            let (code, out, err) = run_command(chown, Duration::from_secs(10), "chown");
            assert_eq!(code, Some(0), "{out}{err}");
        }
        let client = self.connect().await;
        for sql in [
            format!("ALTER SYSTEM SET ssl_ca_file = '{}'", copy.display()),
            "SELECT pg_reload_conf()".to_string(),
        ] {
            client.batch_execute(&sql).await.expect("ssl_ca_file");
        }
    }

    /// A tokio-postgres session on [`Self::dsn`].
    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.dsn(), tokio_postgres::NoTls)
            .await
            .expect("connect to the throwaway PostgreSQL");
        tokio::spawn(connection);
        client
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            let mut command = as_postgres(&self.bin.join("pg_ctl"));
            command
                .args(["-m", "immediate", "-w", "-D"])
                .arg(dir.path().join("db"))
                .arg("stop");
            let _ = command.output();
        }
    }
}

/// A throwaway PostgreSQL holding what a test created upstream, its
/// session, and a Weir server with its session: how the connector tests
/// start.
pub struct PgAndWeir {
    pub pg: PgCluster,
    pub upstream: tokio_postgres::Client,
    pub server: crate::harness::WeirServer,
    pub client: tokio_postgres::Client,
    /// The `dsn` option that reaches `pg`.
    pub dsn: String,
}

/// Starts PostgreSQL, runs `upstream_sql` there, then starts Weir.
pub async fn pg_and_weir(upstream_sql: &str) -> PgAndWeir {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute(upstream_sql)
        .await
        .unwrap_or_else(|e| panic!("{upstream_sql}: {e}"));
    let server = crate::harness::WeirServer::start();
    let client = server.connect().await;
    let dsn = pg.dsn();
    PgAndWeir {
        pg,
        upstream,
        server,
        client,
        dsn,
    }
}
