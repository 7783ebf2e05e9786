//! A realistic SQL migration (`tests/migrations/blog`) applied to Weir and
//! to a throwaway PostgreSQL: the two schemas (`information_schema`,
//! `pg_indexes`, comments) and the data must come out equal, after the up
//! migration and again after the down one: run directly, and by real
//! migration tools (dbmate, yoyo, sqlx-cli, refinery, alembic), which keep
//! their own bookkeeping tables, take locks and run each migration in a
//! transaction; alembic's `check` then compares the database with the
//! SQLAlchemy models as autogenerate does.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::WeirServer;
use crate::postgres::PgCluster;

fn read(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/migrations")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every dump query's rows on `client`, keyed by the query.
async fn dump(client: &tokio_postgres::Client) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for query in read("schema_dump.sql")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("--"))
    {
        // After the down migration the view and tables are gone on both:
        // the same error is the same answer.
        let rows = match crate::harness::try_rows(client, query).await {
            Ok(rows) => rows,
            Err(e) => vec![format!(
                "error {}",
                e.as_db_error()
                    .map(|d| d.code().code().to_string())
                    .unwrap_or_else(|| e.to_string())
            )],
        };
        out.push((query.to_string(), rows));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_gives_the_same_schema_and_data_as_on_postgresql() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    let weir = WeirServer::start();
    let client = weir.connect().await;
    for (step, file) in [("up", "blog/001_up.sql"), ("down", "blog/001_down.sql")] {
        let sql = read(file);
        upstream
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL, {file}: {e}"));
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("Weir, {file}: {e}"));
        let expected = dump(&upstream).await;
        let got = dump(&client).await;
        for ((query, want), (_, have)) in expected.iter().zip(&got) {
            assert_eq!(have, want, "after {step}: {query}");
        }
    }
}

/// A migration tool: how to lay the blog migration out for it in a
/// directory, and the commands that apply and roll it back against a
/// database on a port (user and database `weir` on both servers).
struct Tool {
    name: &'static str,
    layout: fn(&Path),
    up: fn(&Path, u16) -> Command,
    /// `None`: the tool has no down migrations (refinery).
    down: Option<fn(&Path, u16) -> Command>,
}

fn home_cache(path: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let path = PathBuf::from(home).join(".cache").join(path);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test-all.sh, which installs the migration tools",
        path.display()
    );
    path
}

fn dbmate(dir: &Path, port: u16, verb: &str) -> Command {
    let mut c = Command::new(home_cache("weir-npm/node_modules/.bin/dbmate"));
    c.current_dir(dir)
        .env(
            "DATABASE_URL",
            format!("postgres://weir@127.0.0.1:{port}/weir?sslmode=disable"),
        )
        .args(["--no-dump-schema", verb]);
    c
}

fn yoyo(dir: &Path, port: u16, verb: &str) -> Command {
    let mut c = Command::new(home_cache("weir-venv/bin/yoyo"));
    c.args([
        verb,
        "--batch",
        "--no-config-file",
        "--database",
        &format!("postgresql+psycopg://weir@127.0.0.1:{port}/weir"),
    ])
    .arg(dir.join("migrations"));
    c
}

const DBMATE: Tool = Tool {
    name: "dbmate",
    layout: |dir| {
        let migrations = dir.join("db/migrations");
        std::fs::create_dir_all(&migrations).unwrap();
        let text = format!(
            "-- migrate:up\n{}\n-- migrate:down\n{}",
            read("blog/001_up.sql"),
            read("blog/001_down.sql")
        );
        std::fs::write(migrations.join("20260101000000_blog.sql"), text).unwrap();
    },
    up: |dir, port| dbmate(dir, port, "up"),
    down: Some(|dir, port| dbmate(dir, port, "down")),
};

const YOYO: Tool = Tool {
    name: "yoyo",
    layout: |dir| {
        let migrations = dir.join("migrations");
        std::fs::create_dir_all(&migrations).unwrap();
        std::fs::write(migrations.join("0001.blog.sql"), read("blog/001_up.sql")).unwrap();
        std::fs::write(
            migrations.join("0001.blog.rollback.sql"),
            read("blog/001_down.sql"),
        )
        .unwrap();
    },
    up: |dir, port| yoyo(dir, port, "apply"),
    down: Some(|dir, port| yoyo(dir, port, "rollback")),
};

fn cargo_bin(name: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    let path = PathBuf::from(home).join(".cargo/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test-all.sh, which installs the migration tools",
        path.display()
    );
    path
}

fn sqlx(dir: &Path, port: u16, verb: &str) -> Command {
    let mut c = Command::new(cargo_bin("sqlx"));
    c.args(["migrate", verb, "--database-url"])
        .arg(format!(
            "postgres://weir@127.0.0.1:{port}/weir?sslmode=disable"
        ))
        .arg("--source")
        .arg(dir.join("migrations"));
    c
}

const SQLX: Tool = Tool {
    name: "sqlx-cli",
    layout: |dir| {
        let migrations = dir.join("migrations");
        std::fs::create_dir_all(&migrations).unwrap();
        std::fs::write(
            migrations.join("20260101000000_blog.up.sql"),
            read("blog/001_up.sql"),
        )
        .unwrap();
        std::fs::write(
            migrations.join("20260101000000_blog.down.sql"),
            read("blog/001_down.sql"),
        )
        .unwrap();
    },
    up: |dir, port| sqlx(dir, port, "run"),
    down: Some(|dir, port| sqlx(dir, port, "revert")),
};

const REFINERY: Tool = Tool {
    name: "refinery",
    layout: |dir| {
        let migrations = dir.join("migrations");
        std::fs::create_dir_all(&migrations).unwrap();
        std::fs::write(migrations.join("V1__blog.sql"), read("blog/001_up.sql")).unwrap();
    },
    up: |dir, port| {
        let mut c = Command::new(cargo_bin("refinery"));
        c.env(
            "WEIR_MIGRATION_URL",
            format!("postgres://weir@127.0.0.1:{port}/weir"),
        )
        .args(["migrate", "-e", "WEIR_MIGRATION_URL", "-p"])
        .arg(dir.join("migrations"));
        c
    },
    down: None,
};

fn alembic(dir: &Path, port: u16, commands: &str) -> Command {
    let bin = home_cache("weir-venv/bin");
    let mut c = Command::new("sh");
    c.current_dir(dir)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env(
            "WEIR_MIGRATION_URL",
            format!("postgresql+psycopg://weir@127.0.0.1:{port}/weir"),
        )
        .args(["-ec", commands]);
    c
}

/// The migration written with alembic's operations (SQLAlchemy's DDL
/// compiler writes the SQL); after it, `alembic check` must find no
/// difference between the models and the database (autogenerate's compare,
/// types and server defaults included).
const ALEMBIC: Tool = Tool {
    name: "alembic",
    layout: |dir| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/migrations/alembic");
        std::fs::create_dir_all(dir.join("versions")).unwrap();
        for file in [
            "alembic.ini",
            "env.py",
            "models.py",
            "versions/0001_blog.py",
        ] {
            std::fs::copy(source.join(file), dir.join(file)).unwrap();
        }
    },
    up: |dir, port| alembic(dir, port, "alembic upgrade head; alembic check"),
    down: Some(|dir, port| alembic(dir, port, "alembic downgrade base")),
};

fn run(tool: &str, mut command: Command, server: &str) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{tool} against {server}: {e}"));
    assert!(
        out.status.success(),
        "{tool} against {server} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn tool_migrates_weir_as_postgresql(tool: Tool) {
    let dir = tempfile::tempdir().unwrap();
    (tool.layout)(dir.path());
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    let weir = WeirServer::start();
    let client = weir.connect().await;
    for step in ["up", "down"] {
        let command = match step {
            "up" => tool.up,
            _ => match tool.down {
                Some(down) => down,
                None => break,
            },
        };
        run(tool.name, command(dir.path(), pg.port), "PostgreSQL");
        run(tool.name, command(dir.path(), weir.pg_port), "Weir");
        let expected = dump(&upstream).await;
        let got = dump(&client).await;
        for ((query, want), (_, have)) in expected.iter().zip(&got) {
            assert_eq!(have, want, "{} {step}: {query}", tool.name);
        }
        // Equal could also mean that the tool did nothing on either.
        if step == "up" {
            assert_eq!(
                crate::harness::try_rows(&client, "SELECT count(*) FROM posts")
                    .await
                    .unwrap(),
                vec!["3"],
                "{} applied the migration",
                tool.name
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dbmate_migrates_weir_as_it_migrates_postgresql() {
    tool_migrates_weir_as_postgresql(DBMATE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yoyo_migrates_weir_as_it_migrates_postgresql() {
    tool_migrates_weir_as_postgresql(YOYO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_cli_migrates_weir_as_it_migrates_postgresql() {
    tool_migrates_weir_as_postgresql(SQLX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refinery_migrates_weir_as_it_migrates_postgresql() {
    tool_migrates_weir_as_postgresql(REFINERY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alembic_migrates_weir_as_it_migrates_postgresql() {
    tool_migrates_weir_as_postgresql(ALEMBIC).await;
}
