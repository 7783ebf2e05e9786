//! SCRAM-SHA-256 authentication (`--auth scram --superuser-password`): the
//! right password connects, a wrong one fails with 28P01, and a user created
//! with a password can log in.

use std::process::Command;
use std::time::Duration;

use crate::harness::{Options, WeirServer, run_command, sqlstate};

fn config(server: &WeirServer, user: &str, password: Option<&str>) -> tokio_postgres::Config {
    let mut config = server.pg_config();
    config.user(user);
    if let Some(p) = password {
        config.password(p);
    }
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_checks_passwords_and_new_users_can_log_in() {
    let server = WeirServer::start_with(Options::default().scram("pw"));

    let client = server
        .try_connect(config(&server, "weir", Some("pw")))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the superuser with the right password must connect: {e:?}\n{}",
                server.log_tail()
            )
        });
    let user: String = client
        .query_one("SELECT current_user", &[])
        .await
        .expect("current_user")
        .get(0);
    // Identity is checked last, so a wrong current_user does not hide the
    // password checks below.
    let mut identity = Vec::new();
    if user != "weir" {
        identity.push(format!(
            "current_user of the superuser session is {user:?}, expected \"weir\""
        ));
    }

    let err = server
        .try_connect(config(&server, "weir", Some("not-pw")))
        .await
        .expect_err("a wrong password must be refused");
    assert_eq!(sqlstate(&err), "28P01", "wrong password: {err:?}");

    let err = server
        .try_connect(config(&server, "weir", None))
        .await
        .expect_err("no password must be refused");
    assert!(
        format!("{err:?}").contains("password missing") || sqlstate(&err) == "28P01",
        "no password: {err:?}"
    );

    let err = server
        .try_connect(config(&server, "auth_nobody", Some("pw")))
        .await
        .expect_err("an unknown user must be refused");
    assert_eq!(
        sqlstate(&err),
        "28P01",
        "unknown user (same error as a bad password): {err:?}"
    );

    // PostgreSQL's spelling; the issue names it.
    let form = "CREATE USER auth_bob PASSWORD 'x'";
    client
        .batch_execute(form)
        .await
        .unwrap_or_else(|e| panic!("{form}: {e:?}"));
    client
        .batch_execute("CREATE ROLE auth_carol WITH LOGIN PASSWORD 'y'")
        .await
        .expect("CREATE ROLE ... LOGIN PASSWORD");

    let bob = server
        .try_connect(config(&server, "auth_bob", Some("x")))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "auth_bob created with `{form}` must connect: {e:?}\n{}",
                server.log_tail()
            )
        });
    let user: String = bob
        .query_one("SELECT current_user", &[])
        .await
        .expect("current_user")
        .get(0);
    if user != "auth_bob" {
        identity.push(format!(
            "current_user of auth_bob's session is {user:?}, expected \"auth_bob\""
        ));
    }
    let err = server
        .try_connect(config(&server, "auth_bob", Some("y")))
        .await
        .expect_err("auth_bob with a wrong password must be refused");
    assert_eq!(sqlstate(&err), "28P01", "{err:?}");

    // libpq's SCRAM implementation (psql) as well as tokio-postgres'.
    let mut psql = Command::new("psql");
    psql.args([
        "-X",
        "-tA",
        "-h",
        "127.0.0.1",
        "-p",
        &server.pg_port.to_string(),
        "-U",
        "weir",
        "weir",
    ])
    .args(["-c", "SELECT 'scram ok'"])
    .env("PGPASSWORD", "pw")
    .env("PGCONNECT_TIMEOUT", "30");
    let (code, out, err) = run_command(psql, Duration::from_secs(60), "psql with SCRAM");
    assert!(
        code == Some(0) && out.trim() == "scram ok",
        "psql with the right password: exit {code:?}\nstdout: {out}\nstderr: {err}"
    );
    assert!(identity.is_empty(), "{}", identity.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_is_the_default() {
    let server = WeirServer::start();
    let client = server
        .try_connect(config(&server, "weir", None))
        .await
        .unwrap_or_else(|e| panic!("trust auth lets the superuser in without a password: {e:?}"));
    let user: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .expect("current_user")
        .get(0);
    assert_eq!(user, "weir");
}
