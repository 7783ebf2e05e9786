//! psql against `weir`: the meta-commands that read pg_catalog (`\l`, `\dn`,
//! `\dt`, `\d table`, `\df`) and a five-minute-tour script with `\copy`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{WeirServer, run_command};

const PSQL_TIMEOUT: Duration = Duration::from_secs(60);

fn psql_binary() -> &'static str {
    let found = Command::new("psql")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "psql is not installed: run scripts/test-all.sh, or `apt-get install -y postgresql-client`"
    );
    "psql"
}

/// `psql -X -h 127.0.0.1 -p PORT -U weir weir` plus `args`; panics unless psql
/// exits 0 with nothing on stderr that looks like an error. Returns stdout.
fn psql(server: &WeirServer, args: &[&str]) -> String {
    let mut command = Command::new(psql_binary());
    command
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p"])
        .arg(server.pg_port.to_string())
        .args(["-U", "weir", "weir"])
        .args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("PG") {
            command.env_remove(key);
        }
    }
    command
        .env("PGCONNECT_TIMEOUT", "30")
        .env("PAGER", "")
        .env("PSQL_PAGER", "");
    let what = format!("psql {}", args.join(" "));
    let (code, stdout, stderr) = run_command(command, PSQL_TIMEOUT, &what);
    assert_eq!(
        code,
        Some(0),
        "{what} should exit 0\nstdout:\n{stdout}\nstderr:\n{stderr}\n{}",
        server.log_tail()
    );
    assert!(
        !stderr.contains("ERROR") && !stderr.contains("error:"),
        "{what} printed an error\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

fn assert_contains_all(output: &str, what: &str, needles: &[&str]) {
    let missing: Vec<&&str> = needles.iter().filter(|n| !output.contains(**n)).collect();
    assert!(
        missing.is_empty(),
        "{what}: missing {missing:?} in output:\n{output}"
    );
}

#[test]
fn psql_meta_commands_describe_the_catalog() {
    let server = WeirServer::start();
    psql(
        &server,
        &[
            "-c",
            "CREATE SCHEMA psql_sales",
            "-c",
            "CREATE TABLE psql_orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(10,2), placed_at timestamptz)",
            "-c",
            "CREATE TABLE psql_sales.psql_regions (code varchar(4) PRIMARY KEY, name text DEFAULT 'unnamed')",
        ],
    );

    let out = psql(&server, &["-c", "\\l"]);
    assert_contains_all(&out, "\\l lists databases", &["List of databases", "weir"]);

    let out = psql(&server, &["-c", "\\dn"]);
    assert_contains_all(
        &out,
        "\\dn lists schemas",
        &["List of schemas", "public", "psql_sales"],
    );

    let out = psql(&server, &["-c", "\\dt"]);
    assert_contains_all(
        &out,
        "\\dt lists tables on the search path",
        &["psql_orders", "table", "public"],
    );
    assert!(
        !out.contains("psql_regions"),
        "\\dt shows only the search path:\n{out}"
    );

    let out = psql(&server, &["-c", "\\dt psql_sales.*"]);
    assert_contains_all(&out, "\\dt psql_sales.*", &["psql_regions", "psql_sales"]);

    // With the schema on the path, its tables are visible too.
    let out = psql(
        &server,
        &["-c", "SET search_path = psql_sales, public", "-c", "\\dt"],
    );
    assert_contains_all(
        &out,
        "\\dt after SET search_path",
        &["psql_orders", "psql_regions"],
    );

    let out = psql(&server, &["-c", "\\d psql_orders"]);
    assert_contains_all(
        &out,
        "\\d psql_orders describes columns and the key",
        &[
            "psql_orders",
            "id",
            "bigint",
            "customer",
            "text",
            "not null",
            "amount",
            "numeric(10,2)",
            "placed_at",
            "timestamp with time zone",
            "\"psql_orders_pkey\" PRIMARY KEY, btree (id)",
        ],
    );

    let out = psql(&server, &["-c", "\\d psql_sales.psql_regions"]);
    assert_contains_all(
        &out,
        "\\d psql_sales.psql_regions (with the column default)",
        &["code", "character varying(4)", "name", "'unnamed'"],
    );

    // Foreign keys, both ways, and the other constraints and indexes.
    psql(
        &server,
        &[
            "-c",
            "CREATE TABLE psql_lines (id int PRIMARY KEY, order_id bigint REFERENCES psql_orders (id) ON DELETE CASCADE, qty int CHECK (qty > 0), sku text UNIQUE)",
        ],
    );
    let out = psql(&server, &["-c", "\\d psql_lines"]);
    assert_contains_all(
        &out,
        "\\d psql_lines lists its constraints",
        &[
            "\"psql_lines_sku_key\" UNIQUE CONSTRAINT, btree (sku)",
            "Check constraints:",
            "\"psql_lines_qty_check\" CHECK (",
            "Foreign-key constraints:",
            "\"psql_lines_order_id_fkey\" FOREIGN KEY (order_id) REFERENCES psql_orders(id) ON DELETE CASCADE",
        ],
    );
    let out = psql(&server, &["-c", "\\d psql_orders"]);
    assert_contains_all(
        &out,
        "\\d psql_orders lists who references it",
        &[
            "Referenced by:",
            "TABLE \"psql_lines\" CONSTRAINT \"psql_lines_order_id_fkey\" FOREIGN KEY (order_id) REFERENCES psql_orders(id) ON DELETE CASCADE",
        ],
    );

    // A projection is a materialized view to psql.
    psql(
        &server,
        &[
            "-c",
            "CREATE PROJECTION psql_spend AS SELECT customer, sum(amount) AS total FROM psql_orders GROUP BY customer",
        ],
    );
    let out = psql(&server, &["-c", "\\dm"]);
    assert_contains_all(
        &out,
        "\\dm lists projections",
        &["psql_spend", "materialized view"],
    );
    let out = psql(&server, &["-c", "\\d psql_spend"]);
    assert_contains_all(
        &out,
        "\\d psql_spend describes a projection",
        &[
            "Materialized view \"public.psql_spend\"",
            "customer",
            "total",
            "numeric",
        ],
    );

    // Views: \dv lists them, \d+ shows the definition; \dt+ sizes tables.
    psql(
        &server,
        &[
            "-c",
            "CREATE VIEW psql_big_orders AS SELECT id, customer FROM psql_orders WHERE amount > 100",
            "-c",
            "INSERT INTO psql_orders (id, customer, amount) SELECT i, 'c', 200 FROM generate_series(1, 100) AS s(i)",
        ],
    );
    let out = psql(&server, &["-c", "\\dv"]);
    assert_contains_all(&out, "\\dv lists views", &["psql_big_orders", "view"]);
    let out = psql(&server, &["-c", "\\d+ psql_big_orders"]);
    assert_contains_all(
        &out,
        "\\d+ describes a view",
        &[
            "View \"public.psql_big_orders\"",
            "View definition:",
            "amount > 100",
        ],
    );
    let out = psql(&server, &["-c", "\\dt+ psql_orders"]);
    assert_contains_all(&out, "\\dt+ sizes a table", &["psql_orders", " bytes"]);
    assert!(!out.contains("| 0 bytes"), "100 rows take room:\n{out}");

    // \df runs its pg_proc query without error; it names its columns.
    let out = psql(&server, &["-c", "\\df"]);
    assert_contains_all(
        &out,
        "\\df lists functions",
        &["List of functions", "Schema", "Name"],
    );
    let out = psql(&server, &["-c", "\\df int4pl"]);
    assert_contains_all(
        &out,
        "\\df int4pl describes a built-in function",
        &["pg_catalog", "int4pl", "integer, integer"],
    );

    // \d with no arguments lists relations.
    let out = psql(&server, &["-c", "\\d"]);
    assert_contains_all(
        &out,
        "\\d lists relations",
        &["List of relations", "psql_orders"],
    );
}

#[test]
fn five_minute_tour_with_copy_from_a_csv_file() {
    let server = WeirServer::start();
    let dir = server.scratch_dir();
    let csv = dir.join("rides.csv");
    std::fs::write(
        &csv,
        "id,rider,city,fare,started_at\n\
         1,ana,Lisbon,12.50,2024-05-01 08:00:00+00\n\
         2,ben,Porto,7.25,2024-05-01 08:30:00+00\n\
         3,ana,Lisbon,20.00,2024-05-02 09:15:00+00\n\
         4,cai,Lisbon,5.00,2024-05-02 10:00:00+00\n\
         5,ben,\"Porto\",,2024-05-03 11:45:00+00\n",
    )
    .expect("write rides.csv");
    let script = dir.join("tour.sql");
    std::fs::write(&script, tour_script(&csv)).expect("write tour.sql");

    let out = psql(&server, &["-f", &script.to_string_lossy()]);
    assert_contains_all(&out, "\\copy reports its row count", &["COPY 5"]);
    // Unaligned, tuples-only output: one "city|rides|total" line per group.
    assert_contains_all(
        &out,
        "aggregate per city",
        &["Lisbon|3|37.50", "Porto|2|7.25"],
    );
    assert_contains_all(&out, "rides per rider", &["ana|2", "ben|2", "cai|1"]);
    assert_contains_all(&out, "the NULL fare", &["fare_missing|5"]);
    assert_contains_all(&out, "UPDATE then count", &["UPDATE 1", "after_update|1"]);
}

fn tour_script(csv: &Path) -> String {
    format!(
        r#"\set ON_ERROR_STOP on
\pset format unaligned
\pset tuples_only on
CREATE TABLE tour_rides (id bigint PRIMARY KEY, rider text NOT NULL, city text, fare numeric(8,2), started_at timestamptz);
\copy tour_rides FROM '{csv}' WITH (FORMAT csv, HEADER true)
SELECT city, count(*) AS rides, sum(fare) AS total FROM tour_rides GROUP BY city ORDER BY city;
SELECT rider, count(*) FROM tour_rides GROUP BY rider ORDER BY rider;
SELECT 'fare_missing', id FROM tour_rides WHERE fare IS NULL;
UPDATE tour_rides SET fare = 9.00 WHERE id = 5;
SELECT 'after_update', count(*) FROM tour_rides WHERE fare IS NULL OR fare = 9.00 AND id = 5;
DROP TABLE tour_rides;
"#,
        csv = csv.display()
    )
}

/// A source is a foreign table to psql: `\d` shows its columns and, as
/// the footer, its connector as the server and its options; a sink is no
/// relation (it has no rows to read) and leaves `\d` alone.
#[test]
fn psql_describes_a_source_as_a_foreign_table() {
    let server = WeirServer::start();
    psql(
        &server,
        &[
            "-c",
            "CREATE SOURCE psql_bid (auction BIGINT, price BIGINT, date_time TIMESTAMP) WITH (connector = 'nexmark', event = 'bid', max_events = '100', base_time = '1700000000000')",
            "-c",
            "CREATE SINK psql_counts AS SELECT auction % 10 AS k, count(*) AS n FROM psql_bid GROUP BY 1 WITH (connector = 'blackhole')",
        ],
    );
    for command in ["\\d psql_bid", "\\d+ psql_bid"] {
        let out = psql(&server, &["-c", command]);
        assert_contains_all(
            &out,
            command,
            &[
                "Foreign table \"public.psql_bid\"",
                "auction",
                "bigint",
                "date_time",
                "timestamp without time zone",
                "Server: nexmark",
                "FDW options: (base_time '1700000000000', event 'bid', max_events '100')",
            ],
        );
    }
    let out = psql(&server, &["-c", "\\d"]);
    assert_contains_all(&out, "\\d lists the source", &["psql_bid", "foreign table"]);
    assert!(
        !out.contains("psql_counts"),
        "a sink is no relation:\n{out}"
    );
    let out = psql(&server, &["-c", "\\det", "-c", "\\des"]);
    assert_contains_all(&out, "\\det and \\des", &["psql_bid", "nexmark"]);
    // Sinks are in weir_catalog.sinks, which psql describes as a view.
    let out = psql(&server, &["-c", "\\d weir_catalog.sinks"]);
    assert_contains_all(
        &out,
        "\\d weir_catalog.sinks",
        &["committed_epoch", "definition"],
    );
}
