//! Unit tests of the Nexmark runner's statement rewriting and parsing.

use super::*;

#[test]
fn event_counts_follow_the_1_3_46_cycle() {
    let n = 10_000_000;
    assert_eq!(Event::Person.count(n), 200_000);
    assert_eq!(Event::Auction.count(n), 600_000);
    assert_eq!(Event::Bid.count(n), 9_200_000);
    // Within a cycle: event 0 is a person, 1-3 auctions, 4-49 bids.
    assert_eq!(
        [Event::Person, Event::Auction, Event::Bid].map(|e| e.count(5)),
        [1, 3, 1]
    );
    assert_eq!(
        [Event::Person, Event::Auction, Event::Bid].map(|e| e.count(2)),
        [1, 1, 0]
    );
    assert_eq!(
        [Event::Person, Event::Auction, Event::Bid].map(|e| e.share_of(100_000)),
        [2_000, 6_000, 92_000]
    );
    for total in 0..500 {
        let sum: u64 = [Event::Person, Event::Auction, Event::Bid]
            .iter()
            .map(|e| e.count(total))
            .sum();
        assert_eq!(sum, total);
    }
}

#[test]
fn sources_get_their_limits_inside_the_with_list() {
    let sources = source_statements(SOURCES_SQL).unwrap();
    let names: Vec<&str> = sources.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["person", "auction", "bid"]);
    let bid = with_limits(&sources[2].1, 1000, BASE_TIME_MS).unwrap();
    assert!(bid.starts_with("CREATE SOURCE bid (auction BIGINT"));
    assert!(bid.ends_with(
        "WITH (connector = 'nexmark', event = 'bid', max_events = '1000', base_time = '1700000000000')"
    ));
    assert!(with_limits("CREATE SOURCE x (a INT)", 1, 2).is_err());
}

#[test]
fn every_query_reads_the_sources_it_names_in_from() {
    let expected = |name: &str| -> &[&str] {
        match name {
            "q3" | "q8" => &["auction", "person"],
            "q4" | "q9" | "q20" => &["auction", "bid"],
            _ => &["bid"],
        }
    };
    let sources = ["person", "auction", "bid"];
    for (name, sql) in QUERIES {
        let read: Vec<String> = relations_read(sql)
            .into_iter()
            .filter(|r| sources.contains(&r.as_str()))
            .collect();
        assert_eq!(read, expected(name), "{name}");
    }
}

#[test]
fn relations_skip_literals_columns_and_subqueries() {
    let read = relations_read(
        "SELECT bid.auction, 'from person' FROM (SELECT * FROM x) AS s, y JOIN \"Z\" ON a = b \
         WHERE c IN (SELECT d FROM w), e",
    );
    assert_eq!(read, BTreeSet::from(["Z", "w", "x", "y"].map(String::from)));
}

#[test]
fn queries_lose_their_semicolon() {
    assert_eq!(
        query_text("q0"),
        Some("SELECT auction, bidder, price, date_time FROM bid")
    );
    assert_eq!(query_text("q6"), None);
    assert_eq!(QUERIES.len(), 19);
}

#[test]
fn a_line_per_outcome() {
    let done = Outcome {
        query: "q0".into(),
        supported: Some(true),
        events: 1000,
        wall_s: 2.0,
        cpu_s: 4.0,
        ..Outcome::default()
    };
    assert!(done.line().contains("500"));
    assert!(done.line().contains("250"));
    assert_eq!(done.to_json()["events_per_core_s"], json!(250.0));
    let refused = Outcome {
        query: "q5".into(),
        supported: Some(false),
        error: Some("HOP is not\nsupported".into()),
        ..Outcome::default()
    };
    assert!(
        refused
            .line()
            .ends_with("not supported: HOP is not supported")
    );
    assert_eq!(refused.to_json()["wall_s"], json!(null));
    assert_eq!(refused.to_json()["supported"], json!(false));
    let broken = Outcome {
        query: "q7".into(),
        error: Some("weir exited".into()),
        ..Outcome::default()
    };
    assert!(broken.line().ends_with("failed: weir exited"));
    assert_eq!(broken.to_json()["supported"], json!(null));
}
