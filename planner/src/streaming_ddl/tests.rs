//! Parser tests: every statement form, read back through its marker.

use super::*;
use datafusion::sql::sqlparser::tokenizer::Tokenizer;

fn parse(sql: &str) -> Result<StreamingDdl, ParserError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize_with_location()
        .unwrap();
    assert!(is_streaming(&tokens), "{sql}");
    parse_streaming(tokens)
}

#[test]
fn reads_sources_sinks_and_their_options() {
    let source = parse(
            "CREATE SOURCE IF NOT EXISTS S.Bid (auction BIGINT, \"Price\" BIGINT NOT NULL, date_time TIMESTAMP,
               WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
             WITH (connector = 'nexmark', event = 'bid', rate_limit = 100, fields.x.kind = 'random')",
        )
        .unwrap();
    let StreamingDdl::CreateSource {
        if_not_exists,
        name,
        columns,
        watermark,
        options,
        ..
    } = source
    else {
        panic!("not a source")
    };
    assert!(if_not_exists);
    assert_eq!(name, vec!["s", "bid"]);
    assert_eq!(columns[1].name, "Price");
    assert!(columns[1].not_null);
    assert_eq!(columns[2].data_type, "TIMESTAMP");
    let (column, expr) = watermark.unwrap();
    assert_eq!(column, "date_time");
    assert_eq!(expr, "date_time - INTERVAL '4' SECOND");
    assert_eq!(options[2], ("rate_limit".into(), "100".into()));
    assert_eq!(options[3].0, "fields.x.kind");

    let bare =
        parse("CREATE SINK q0 AS SELECT auction FROM bid WITH (connector = 'blackhole')").unwrap();
    assert!(
        matches!(&bare, StreamingDdl::CreateSink { query: Some(q), options, .. }
            if q == "SELECT auction FROM bid" && options.len() == 1),
        "{bare:?}"
    );
    let cte = parse(
        "CREATE SINK c AS WITH x AS (SELECT 1 AS a) SELECT a FROM x WITH (connector = 'log')",
    )
    .unwrap();
    assert!(
        matches!(&cte, StreamingDdl::CreateSink { query: Some(q), .. } if q.starts_with("WITH x AS")),
        "{cte:?}"
    );
    let sink =
        parse("create sink out as select a, b from t where a > 1 with (connector = 'blackhole')")
            .unwrap();
    assert!(
        matches!(&sink, StreamingDdl::CreateSink { query: Some(q), from: None, .. } if q == "SELECT a, b FROM t WHERE a > 1")
    );
    assert_eq!(from_statement(&to_statement(&sink)), Some(sink));
    // EMIT ON WINDOW CLOSE after the query, before or after the options.
    for sql in [
        "CREATE SINK w AS SELECT k, count(*) FROM t GROUP BY k EMIT ON WINDOW CLOSE WITH (connector = 'log')",
        "CREATE SINK w AS SELECT k, count(*) FROM t GROUP BY k WITH (connector = 'log') emit on window close;",
    ] {
        let sink = parse(sql).unwrap();
        assert!(
            matches!(&sink, StreamingDdl::CreateSink { query: Some(q), emit_on_window_close: true, options, .. }
                if q == "SELECT k, count(*) FROM t GROUP BY k" && options.len() == 1),
            "{sql}: {sink:?}"
        );
    }
    assert!(matches!(
        parse("CREATE SINK w AS SELECT k FROM t GROUP BY k WITH (connector = 'log')").unwrap(),
        StreamingDdl::CreateSink {
            emit_on_window_close: false,
            ..
        }
    ));
    let refused = parse("CREATE SINK w FROM p EMIT ON WINDOW CLOSE WITH (connector = 'log')")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("create the projection with it"),
        "{refused}"
    );
    assert!(matches!(
        parse("DROP SINK IF EXISTS a, b CASCADE").unwrap(),
        StreamingDdl::Drop { kind: StreamingKind::Sink, if_exists: true, cascade: true, ref names } if names.len() == 2
    ));
    assert_eq!(
        parse("SHOW CONNECTORS").unwrap(),
        StreamingDdl::Show { kind: None }
    );
    assert!(parse("CREATE SINK x WITH (connector = 'blackhole')").is_err());
    assert!(parse("CREATE SOURCE x (a int DEFAULT 1) WITH (connector = 'datagen')").is_err());
    assert!(parse("CREATE SOURCE x WITH (connector = 'a', connector = 'b')").is_err());
}

#[test]
fn reads_secrets_connections_and_secret_options() {
    assert_eq!(
        parse("CREATE SECRET IF NOT EXISTS Pg_Pass AS 'hunter2'").unwrap(),
        StreamingDdl::CreateSecret {
            if_not_exists: true,
            name: "pg_pass".into(),
            value: "hunter2".into(),
        }
    );
    assert_eq!(
        parse("ALTER SECRET pg_pass AS 'new'").unwrap(),
        StreamingDdl::AlterSecret {
            name: "pg_pass".into(),
            value: "new".into(),
        }
    );
    assert!(parse("CREATE SECRET s AS 12").is_err());
    assert_eq!(
        parse("CREATE CONNECTION shop TO postgres (dsn = 'host=db', password = SECRET pg_pass)")
            .unwrap(),
        StreamingDdl::CreateConnection {
            if_not_exists: false,
            name: "shop".into(),
            kind: "postgres".into(),
            options: vec![("dsn".into(), "host=db".into())],
            secrets: vec![("password".into(), "pg_pass".into())],
        }
    );
    assert!(matches!(
        parse("ALTER CONNECTION shop SET (dsn = 'host=db2')").unwrap(),
        StreamingDdl::AlterConnection { ref options, .. } if options.len() == 1
    ));
    assert_eq!(
        parse("DROP SECRET IF EXISTS a, b CASCADE").unwrap(),
        StreamingDdl::DropNamed {
            what: NamedKind::Secret,
            if_exists: true,
            names: vec!["a".into(), "b".into()],
            cascade: true,
        }
    );
    assert_eq!(
        parse("SHOW CONNECTIONS").unwrap(),
        StreamingDdl::ShowNamed {
            what: NamedKind::Connection
        }
    );
    let source = parse(
            "CREATE SOURCE o WITH (connector = 'postgres-cdc', connection = shop, password = SECRET pg_pass)",
        )
        .unwrap();
    assert!(
        matches!(&source, StreamingDdl::CreateSource { options, secrets, .. }
                if options[1] == ("connection".into(), "shop".into())
                    && secrets == &[("password".to_string(), "pg_pass".to_string())]),
        "{source:?}"
    );
    // A quoted 'secret' is a value like any other.
    assert!(matches!(
        parse("CREATE SOURCE o WITH (connector = 'x', word = 'secret')").unwrap(),
        StreamingDdl::CreateSource { ref secrets, .. } if secrets.is_empty()
    ));
    let sink =
        parse("CREATE SINK s AS SELECT 1 AS a WITH (connector = 'postgres', password = SECRET p)")
            .unwrap();
    assert!(matches!(&sink, StreamingDdl::CreateSink { secrets, .. } if secrets.len() == 1));
    assert_eq!(from_statement(&to_statement(&sink)), Some(sink));
}

#[test]
fn reads_destinations() {
    let create = parse(
        "CREATE DESTINATION IF NOT EXISTS Top_PG FROM s.top
           INTO postgres (connection = pg, table = 'public.top', password = SECRET pw)
           KEY (Bidder, \"Day\") WITH (on_existing = 'truncate');",
    )
    .unwrap();
    let StreamingDdl::CreateDestination(CreateDestination {
        if_not_exists,
        ref name,
        ref from,
        ref into,
        ref options,
        ref secrets,
        ref key,
        ref with,
    }) = create
    else {
        panic!("not a destination: {create:?}")
    };
    assert!(if_not_exists);
    assert_eq!(name, &["top_pg"]);
    assert_eq!(from, &["s", "top"]);
    assert_eq!(into, "postgres");
    assert_eq!(options.len(), 2);
    assert_eq!(secrets, &[("password".to_string(), "pw".to_string())]);
    assert_eq!(key, &["bidder", "Day"]);
    assert_eq!(with, &[("on_existing".to_string(), "truncate".to_string())]);
    assert_eq!(from_statement(&to_statement(&create)), Some(create.clone()));
    assert!(parse("CREATE DESTINATION d FROM p INTO postgres (table = 't')").is_err());
    assert_eq!(
        parse("ALTER DESTINATION d REPAIR").unwrap(),
        StreamingDdl::AlterDestination {
            name: vec!["d".into()],
            action: DestinationAction::Repair
        }
    );
    assert_eq!(
        parse("alter destination s.d accept gap").unwrap(),
        StreamingDdl::AlterDestination {
            name: vec!["s".into(), "d".into()],
            action: DestinationAction::AcceptGap
        }
    );
    assert!(parse("ALTER DESTINATION d ACCEPT").is_err());
    assert_eq!(
        parse("ALTER DESTINATION d RESUME").unwrap(),
        StreamingDdl::AlterDestination {
            name: vec!["d".into()],
            action: DestinationAction::Resume
        }
    );
    assert_eq!(
        parse("ALTER SOURCE s.bid PAUSE").unwrap(),
        StreamingDdl::AlterSource {
            name: vec!["s".into(), "bid".into()],
            action: SourceAction::Pause
        }
    );
    assert_eq!(
        parse("ALTER SOURCE bid RESET OFFSET").unwrap(),
        StreamingDdl::AlterSource {
            name: vec!["bid".into()],
            action: SourceAction::ResetOffset
        }
    );
    assert!(parse("ALTER SOURCE bid STOP").is_err());
    assert_eq!(
        parse("ALTER SINK out RESET OFFSET").unwrap(),
        StreamingDdl::AlterSink {
            name: vec!["out".into()],
            action: SinkAction::ResetOffset
        }
    );
    for (text, action) in [
        ("ALTER SINK out PAUSE", SinkAction::Pause),
        ("ALTER SINK out RESUME", SinkAction::Resume),
    ] {
        assert_eq!(
            parse(text).unwrap(),
            StreamingDdl::AlterSink {
                name: vec!["out".into()],
                action
            }
        );
    }
    assert!(parse("ALTER SINK out STOP").is_err());
    assert!(parse("ALTER SINK out RESET").is_err());
    assert!(matches!(
        parse("DROP DESTINATION IF EXISTS d CASCADE").unwrap(),
        StreamingDdl::Drop {
            kind: StreamingKind::Destination,
            if_exists: true,
            cascade: true,
            ..
        }
    ));
    assert_eq!(
        parse("SHOW DESTINATIONS").unwrap(),
        StreamingDdl::Show {
            kind: Some(StreamingKind::Destination)
        }
    );
}

#[test]
fn reads_a_table_of_a_source_that_covers_several() {
    let discovered = parse("CREATE SOURCE orders FROM shop TABLE 'public.orders'").unwrap();
    assert_eq!(
        discovered,
        StreamingDdl::CreateSource {
            if_not_exists: false,
            name: vec!["orders".into()],
            columns: vec![],
            watermark: None,
            options: vec![],
            secrets: vec![],
            from: Some((vec!["shop".into()], "public.orders".into())),
        }
    );
    assert_eq!(from_statement(&to_statement(&discovered)), Some(discovered));
    // Columns and a watermark, a qualified source, the table kept as
    // written (quotes and case are the upstream's).
    let declared = parse(
        "create source if not exists s.Lines (id BIGINT NOT NULL, at TIMESTAMP,
           WATERMARK FOR at AS at - INTERVAL '1' SECOND)
         FROM S.\"Shop\" TABLE '\"Sales\".order_lines';",
    )
    .unwrap();
    let StreamingDdl::CreateSource {
        if_not_exists,
        name,
        columns,
        watermark,
        options,
        from,
        ..
    } = declared
    else {
        panic!("not a source")
    };
    assert!(if_not_exists);
    assert_eq!(name, ["s", "lines"]);
    assert_eq!(columns.len(), 2);
    assert!(columns[0].not_null);
    assert_eq!(watermark.unwrap().0, "at");
    assert!(options.is_empty());
    assert_eq!(
        from,
        Some((
            vec!["s".into(), "Shop".into()],
            "\"Sales\".order_lines".into()
        ))
    );
    // A stored statement from before `from` existed still reads.
    let old = r#"{"CreateSource":{"if_not_exists":false,"name":["o"],"columns":[],"watermark":null,"options":[["connector","datagen"]],"secrets":[]}}"#;
    assert!(matches!(
        serde_json::from_str::<StreamingDdl>(old).unwrap(),
        StreamingDdl::CreateSource { from: None, .. }
    ));
    for wrong in [
        "CREATE SOURCE o FROM shop TABLE orders",
        "CREATE SOURCE o FROM shop TABLE ''",
        "CREATE SOURCE o FROM shop 'public.orders'",
        "CREATE SOURCE o FROM shop TABLE 'orders' WITH (connector = 'x')",
        "CREATE SOURCE o FROM TABLE 'orders'",
    ] {
        assert!(parse(wrong).is_err(), "{wrong}");
    }
}

#[test]
fn alter_source_and_sink_set_options() {
    for (sql, kind) in [
        (
            "ALTER SOURCE s SET (rate_limit = '10', password = SECRET pw)",
            StreamingKind::Source,
        ),
        (
            "ALTER SINK public.out SET (table = 't2')",
            StreamingKind::Sink,
        ),
    ] {
        match parse(sql).expect(sql) {
            StreamingDdl::AlterOptions {
                kind: k,
                options,
                secrets,
                ..
            } => {
                assert_eq!(k, kind, "{sql}");
                assert!(!options.is_empty(), "{sql}");
                if kind == StreamingKind::Source {
                    assert_eq!(secrets, vec![("password".to_string(), "pw".to_string())]);
                }
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    assert!(parse("ALTER SINK out SET").is_err());
}

#[test]
fn reads_renames_of_sources_sinks_views_and_projections() {
    use alter::RenamedKind as K;
    for (sql, kind, if_exists, name, to) in [
        (
            "ALTER SOURCE s.Bid RENAME TO bids",
            K::Source,
            false,
            vec!["s", "bid"],
            "bids",
        ),
        (
            "ALTER SINK IF EXISTS out RENAME TO \"Out\"",
            K::Sink,
            true,
            vec!["out"],
            "Out",
        ),
        ("ALTER VIEW v RENAME TO w", K::View, false, vec!["v"], "w"),
        (
            "ALTER MATERIALIZED VIEW IF EXISTS p RENAME TO q",
            K::Projection,
            true,
            vec!["p"],
            "q",
        ),
        (
            "alter projection p rename to q",
            K::Projection,
            false,
            vec!["p"],
            "q",
        ),
    ] {
        let ddl = parse(sql).unwrap();
        assert_eq!(
            ddl,
            StreamingDdl::Rename {
                kind,
                if_exists,
                name: name.into_iter().map(String::from).collect(),
                to: to.into(),
            },
            "{sql}"
        );
        // It travels through its marker statement unchanged.
        assert_eq!(from_statement(&to_statement(&ddl)), Some(ddl), "{sql}");
    }
    // ALTER VIEW ... AS is sqlparser's, not Weir's.
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, "ALTER VIEW v AS SELECT 1")
        .tokenize_with_location()
        .unwrap();
    assert!(!is_streaming(&tokens));
    assert!(parse("ALTER PROJECTION p RENAME q").is_err());
    assert!(parse("ALTER SOURCE s PAUSE").is_ok());
}

#[test]
fn reads_set_schema() {
    use super::alter::MovedKind as K;
    for (sql, kind, if_exists, name) in [
        ("ALTER TABLE t SET SCHEMA app", K::Table, false, vec!["t"]),
        (
            "alter table if exists only s.T set schema App",
            K::Table,
            true,
            vec!["s", "t"],
        ),
        ("ALTER VIEW v SET SCHEMA app", K::View, false, vec!["v"]),
        (
            "ALTER MATERIALIZED VIEW m SET SCHEMA app",
            K::Projection,
            false,
            vec!["m"],
        ),
        (
            "ALTER PROJECTION p SET SCHEMA app",
            K::Projection,
            false,
            vec!["p"],
        ),
        (
            "ALTER SEQUENCE IF EXISTS s SET SCHEMA app",
            K::Sequence,
            true,
            vec!["s"],
        ),
    ] {
        let ddl = parse(sql).unwrap();
        assert_eq!(
            ddl,
            StreamingDdl::SetSchema {
                kind,
                if_exists,
                name: name.into_iter().map(String::from).collect(),
                schema: "app".into(),
            },
            "{sql}"
        );
        assert_eq!(from_statement(&to_statement(&ddl)), Some(ddl), "{sql}");
    }
    // Other ALTER TABLE forms stay sqlparser's.
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, "ALTER TABLE t ADD COLUMN c int")
        .tokenize_with_location()
        .unwrap();
    assert!(!is_streaming(&tokens));
}
