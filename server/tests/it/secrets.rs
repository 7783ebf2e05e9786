//! Secrets and connections: a password held only as a SECRET, named by a
//! CONNECTION to a throwaway PostgreSQL that demands it (SCRAM, for
//! queries and replication), used by a postgres-cdc source; the value
//! never in the data directory, SHOW output or errors; inline passwords
//! refused; ALTER SECRET and ALTER CONNECTION applied at the next use;
//! DROP refused while in use unless CASCADE; all of it kept across a
//! restart.

use std::path::Path;
use std::time::Duration;

use crate::harness::{WeirServer, eventually, try_rows as rows};
use crate::postgres::PgCluster;
use crate::sources::{error_of, kill_and_restart, value};

const PASSWORD: &str = "s3kr1t-Passw0rd-x7";

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_named_by_a_connection_reaches_postgres_and_is_never_shown() {
    let pg = PgCluster::start();
    let upstream = pg.connect().await;
    upstream
        .batch_execute(&format!(
            "CREATE ROLE app LOGIN REPLICATION PASSWORD '{PASSWORD}';
             CREATE TABLE items (id bigint PRIMARY KEY, name text);
             ALTER TABLE items REPLICA IDENTITY FULL;
             GRANT SELECT ON items TO app;
             CREATE TABLE names_copy (id bigint PRIMARY KEY, name text);
             GRANT ALL ON names_copy TO app;
             GRANT CREATE ON SCHEMA public TO app;
             INSERT INTO items VALUES (1, 'one'), (2, 'two');
             CREATE PUBLICATION weir_items FOR TABLE items;"
        ))
        .await
        .unwrap();
    pg.require_passwords().await;
    let mut server = WeirServer::start();
    let client = server.connect().await;
    let dsn = format!("host=127.0.0.1 port={} user=app dbname=weir", pg.port);

    // Inline, a password is refused and not echoed.
    let (code, message) = error_of(
        &client,
        &format!(
            "CREATE SOURCE bad WITH (connector = 'postgres-cdc', dsn = '{dsn}', password = '{PASSWORD}', table = 'items', slot = 'weir_bad')"
        ),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("SECRET"), "{message}");
    assert!(!message.contains(PASSWORD), "{message}");
    let (code, message) = error_of(
        &client,
        &format!("CREATE CONNECTION c TO postgres (dsn = '{dsn}', password = '{PASSWORD}')"),
    )
    .await;
    assert_eq!(code, "22023", "{message}");
    let (code, message) =
        error_of(&client, "CREATE CONNECTION c TO postgres (brokers = 'x')").await;
    assert_eq!(code, "22023", "{message}");
    assert!(message.contains("valid options: dsn"), "{message}");
    let (code, _) = error_of(
        &client,
        &format!("CREATE CONNECTION c TO postgres (dsn = '{dsn}', password = SECRET missing)"),
    )
    .await;
    assert_eq!(code, "42704");

    client
        .batch_execute(&format!(
            "CREATE SECRET app_pass AS '{PASSWORD}';
             CREATE CONNECTION shop TO postgres (dsn = '{dsn}', password = SECRET app_pass);
             CREATE SOURCE items_cdc WITH (connector = 'postgres-cdc', connection = shop,
                 table = 'items', slot = 'weir_items');
             CREATE PROJECTION names AS SELECT id, name FROM items_cdc;"
        ))
        .await
        .expect("a source through a connection and its secret");
    eventually(Duration::from_secs(30), "the snapshot read", || async {
        let got = rows(&client, "SELECT id, name FROM names").await.ok()?;
        (got == ["1|one", "2|two"]).then_some(())
    })
    .await;
    upstream
        .batch_execute("INSERT INTO items VALUES (3, 'three')")
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "a change streamed", || async {
        let got = rows(&client, "SELECT count(*) FROM names").await.ok()?;
        (got == ["3"]).then_some(())
    })
    .await;

    // Shown by name only.
    let secrets = rows(&client, "SHOW SECRETS").await.unwrap();
    assert_eq!(secrets.len(), 1);
    assert!(secrets[0].starts_with("app_pass|"), "{secrets:?}");
    let connections = rows(&client, "SHOW CONNECTIONS").await.unwrap();
    assert!(
        connections[0].contains("password = SECRET app_pass"),
        "{connections:?}"
    );
    assert_eq!(
        rows(&client, "SELECT name, used_by FROM weir_catalog.secrets")
            .await
            .unwrap(),
        ["app_pass|connection shop"]
    );
    assert_eq!(
        rows(
            &client,
            "SELECT name, kind, used_by FROM weir_catalog.connections"
        )
        .await
        .unwrap(),
        ["shop|postgres|source items_cdc"]
    );
    let source = value(&client, "SHOW CREATE SOURCE items_cdc").await;
    assert!(source.contains("connection = shop"), "{source}");
    for shown in secrets.iter().chain(&connections).chain([&source]) {
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
    // In use: refused, naming the user.
    for (drop, user) in [
        ("DROP SECRET app_pass", "connection shop"),
        ("DROP CONNECTION shop", "source items_cdc"),
    ] {
        let e = client.batch_execute(drop).await.expect_err(drop);
        let db = e.as_db_error().expect("a server error");
        assert_eq!(db.code().code(), "2BP01", "{drop}");
        let hint = db.hint().unwrap_or_default();
        assert!(hint.contains(user), "{drop}: {hint}");
    }

    // A sink through the same connection.
    client
        .batch_execute(
            "CREATE SINK copy FROM names WITH (connector = 'postgres', connection = shop,
                 table = 'names_copy', key = 'id')",
        )
        .await
        .unwrap();
    let copied = "SELECT id, name FROM names_copy";
    eventually(Duration::from_secs(30), "the sink's first rows", || async {
        let got = rows(&upstream, copied).await.ok()?;
        (got == ["1|one", "2|two", "3|three"]).then_some(())
    })
    .await;

    // A wrong password, through ALTER SECRET, fails the next use with
    // PostgreSQL's own answer, and the value shows nowhere.
    client
        .batch_execute("ALTER SECRET app_pass AS 'wrong-one'")
        .await
        .unwrap();
    let (code, message) = error_of(
        &client,
        "CREATE SOURCE other WITH (connector = 'postgres-cdc', connection = shop, table = 'items', slot = 'weir_other')",
    )
    .await;
    assert_eq!(code, "58000", "{message}");
    assert!(
        message.contains("password authentication failed"),
        "{message}"
    );
    assert!(!message.contains("wrong-one"), "{message}");
    // The running source takes the new value at once: its reader starts
    // again with it, and PostgreSQL refuses it.
    let refused = eventually(Duration::from_secs(30), "the source refused", || async {
        let row = value(
            &client,
            "SELECT status, error FROM weir_catalog.sources WHERE name = 'items_cdc'",
        )
        .await;
        (!row.starts_with("running|") && row.contains("password authentication failed"))
            .then_some(row)
    })
    .await;
    assert!(!refused.contains("wrong-one"), "{refused}");
    // The sink reopens with it too, and backs off, refused.
    let backing_off = crate::sources::status_becomes(&client, "sinks", "copy", "backing_off").await;
    assert!(
        backing_off.contains("password authentication failed"),
        "{backing_off}"
    );

    // A rotation: the role's password changes upstream, then the secret;
    // the source reconnects with the new one and streams on, where it was.
    const ROTATED: &str = "r0tated-Passw0rd-y8";
    upstream
        .batch_execute(&format!("ALTER ROLE app PASSWORD '{ROTATED}'"))
        .await
        .unwrap();
    client
        .batch_execute(&format!("ALTER SECRET app_pass AS '{ROTATED}'"))
        .await
        .unwrap();
    upstream
        .batch_execute("INSERT INTO items VALUES (5, 'five')")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "a change after the rotation",
        || async {
            let got = rows(&client, "SELECT id, name FROM names WHERE id = 5")
                .await
                .ok()?;
            (got == ["5|five"]).then_some(())
        },
    )
    .await;
    // The sink's next retry takes the rotated password: it catches up.
    eventually(
        Duration::from_secs(60),
        "the sink after the rotation",
        || async {
            let got = rows(&upstream, copied).await.ok()?;
            (got == ["1|one", "2|two", "3|three", "5|five"]).then_some(())
        },
    )
    .await;
    upstream
        .batch_execute(&format!("ALTER ROLE app PASSWORD '{PASSWORD}'"))
        .await
        .unwrap();
    client
        .batch_execute(&format!("ALTER SECRET app_pass AS '{PASSWORD}'"))
        .await
        .unwrap();

    // Across a restart the sealed value opens again (the key is kept in
    // the data directory), and the source goes on.
    let client = kill_and_restart(&mut server, "the restart").await;
    upstream
        .batch_execute("INSERT INTO items VALUES (4, 'four')")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "a change after the restart",
        || async {
            let got = rows(&client, "SELECT count(*) FROM names").await.ok()?;
            (got == ["5"]).then_some(())
        },
    )
    .await;
    let leaked = files_containing(&server.data_dir(), PASSWORD);
    assert!(
        leaked.is_empty(),
        "the password in plain text in {leaked:?}"
    );
    assert!(server.data_dir().join("secret.key").exists());

    // CASCADE takes the connection, the source and its projection along.
    client
        .batch_execute("DROP SECRET app_pass CASCADE")
        .await
        .unwrap();
    assert_eq!(rows(&client, "SHOW CONNECTIONS").await.unwrap().len(), 0);
    assert_eq!(
        value(&client, "SELECT count(*) FROM weir_catalog.sources").await,
        "0"
    );
    eventually(Duration::from_secs(30), "the slot dropped", || async {
        let left = value(
            &upstream,
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'weir_items'",
        )
        .await;
        (left == "0").then_some(())
    })
    .await;
}
