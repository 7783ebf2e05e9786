//! Every query of the Nexmark suite (`bench/nexmark/qN.sql`, identical to
//! the shared definition), maintained as a projection over the three
//! nexmark sources of `sources.sql`, equals the same query run ad hoc by
//! DataFusion over the same generated events once the sources are
//! exhausted.
//!
//! The ad-hoc side reads the events from projections that copy each source
//! (`adhoc.person` = `SELECT * FROM public.person`, ...): with `search_path`
//! set to `adhoc`, the query text runs unchanged against them.
//!
//! Where `ROW_NUMBER()` picks one of equal rows (q9, q18, q19: 10 000
//! events share each millisecond), the columns that tie leaves undecided
//! are left out of the comparison, as the peers' correctness pass does.

use std::time::Duration;

use crate::harness::{WeirServer, eventually, try_rows as rows, workspace_root};

/// Events of all types: 200 persons, 600 auctions, 9 200 bids.
const EVENTS: u64 = 10_000;
const BASE_TIME: &str = "1700000000000";

const QUERIES: &[&str] = &[
    "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q12", "q14", "q15", "q16", "q17", "q18",
    "q19", "q20", "q21", "q22",
];

/// The columns compared where ties make the others nondeterministic.
fn compared_columns(query: &str) -> &'static str {
    match query {
        "q9" => {
            "id, item_name, description, initial_bid, reserve, date_time, expires, seller, category, auction, price"
        }
        "q18" => "auction, bidder, date_time",
        "q19" => "auction, price, rank_number",
        _ => "*",
    }
}

fn read(name: &str) -> String {
    let path = workspace_root().join("bench/nexmark").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `sources.sql` with a bounded, reproducible event stream.
fn sources_sql() -> String {
    read("sources.sql").replace(
        "connector = 'nexmark',",
        &format!("connector = 'nexmark', max_events = '{EVENTS}', base_time = '{BASE_TIME}',"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_nexmark_query_maintained_equals_it_ad_hoc() {
    let server = WeirServer::start_with(
        crate::harness::Options::default().watchdog(Duration::from_secs(900)),
    );
    let client = server.connect().await;
    client
        .batch_execute(&sources_sql())
        .await
        .expect("sources.sql");
    client
        .batch_execute(
            "CREATE SCHEMA adhoc;
             CREATE PROJECTION adhoc.person AS SELECT * FROM public.person;
             CREATE PROJECTION adhoc.auction AS SELECT * FROM public.auction;
             CREATE PROJECTION adhoc.bid AS SELECT * FROM public.bid;",
        )
        .await
        .expect("copies");
    let mut failures = Vec::new();
    for query in QUERIES {
        let text = read(&format!("{query}.sql"));
        let text = text.trim().trim_end_matches(';');
        if let Err(e) = client
            .batch_execute(&format!("CREATE PROJECTION nexmark_{query} AS {text}"))
            .await
        {
            failures.push(format!("{query}: CREATE PROJECTION failed: {e:?}"));
        }
    }
    eventually(
        Duration::from_secs(300),
        "nexmark sources completed",
        || async {
            let statuses = rows(&client, "SELECT status FROM weir_catalog.sources")
                .await
                .ok()?;
            statuses.iter().all(|s| s == "completed").then_some(())
        },
    )
    .await;
    client.batch_execute("FLUSH").await.unwrap();
    let bids = rows(&client, "SELECT count(*) FROM adhoc.bid")
        .await
        .unwrap();
    assert_eq!(bids, vec!["9200"]);
    for query in QUERIES {
        let text = read(&format!("{query}.sql"));
        let text = text.trim().trim_end_matches(';');
        let columns = compared_columns(query);
        let maintained = match rows(
            &client,
            &format!("SELECT {columns} FROM public.nexmark_{query}"),
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{query}: reading the projection failed: {e:?}"));
                continue;
            }
        };
        let ad_hoc = rows(
            &client,
            &format!("SET search_path = adhoc; SELECT {columns} FROM ({text}) AS q; SET search_path = public"),
        )
        .await
        .unwrap_or_else(|e| panic!("{query} ad hoc: {e:?}"));
        if maintained != ad_hoc {
            failures.push(format!(
                "{query}: {} rows maintained, {} ad hoc; first maintained {:?}, first ad hoc {:?}",
                maintained.len(),
                ad_hoc.len(),
                maintained.first(),
                ad_hoc.first()
            ));
        } else if maintained.is_empty() && !matches!(*query, "q2" | "q3") {
            failures.push(format!("{query}: empty result; the test proves nothing"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        server.log_tail()
    );
}
