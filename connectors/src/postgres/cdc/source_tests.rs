//! Tests of the CDC source's pieces that need no PostgreSQL.

use super::*;

#[test]
fn progress_round_trips_as_json() {
    let p = Progress {
        start: 10,
        segments: vec![
            Segment {
                lsn: 10,
                upto: Some(vec!["41".into()]),
            },
            Segment {
                lsn: 20,
                upto: None,
            },
        ],
        snapshot_done: false,
        lsn: 10,
        gaps_accepted: 1,
        table_oid: Some(16385),
    };
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<Progress>(&text).unwrap(), p);
    // Offsets sealed before the table's OID was kept still read.
    let old = r#"{"start":1,"segments":[],"snapshot_done":true,"lsn":1}"#;
    assert_eq!(
        serde_json::from_str::<Progress>(old).unwrap().table_oid,
        None
    );
}

#[test]
fn keys_compare_in_the_snapshot_order() {
    let shape = Shape {
        oid: 1,
        columns: vec![super::super::UpstreamColumn {
            name: "k".into(),
            type_oid: 25,
            type_modifier: -1,
            not_null: true,
            type_name: "text".into(),
        }],
        key: vec!["k".into()],
    };
    let order = KeyOrder::new(&shape).unwrap();
    let a = order.row_of_text(&["B".into()]).unwrap();
    let b = order.row_of_text(&["a".into()]).unwrap();
    // C collation: upper case sorts before lower case.
    assert!(a.row() < b.row());
}
