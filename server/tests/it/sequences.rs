//! Sequences across `kill -9`: values handed out (by `nextval`, `SERIAL`
//! defaults on INSERT and COPY) are never handed out again after a crash,
//! and `setval` holds. A gap is allowed, as in PostgreSQL.

use futures::SinkExt;
use std::collections::BTreeSet;
use tokio_postgres::Client;

use crate::crash::connect_when_ready;
use crate::harness::WeirServer;

async fn ids(client: &Client) -> Vec<i64> {
    client
        .query("SELECT id FROM seq_crash ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_values_are_never_handed_out_twice_across_kill_9() {
    let mut server = WeirServer::start();
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE seq_crash (id BIGSERIAL PRIMARY KEY, round INT);
             CREATE SEQUENCE seq_loose;",
        )
        .await
        .unwrap();
    let mut handed_out: BTreeSet<i64> = BTreeSet::new();
    let mut rows = 0usize;
    for round in 0..4 {
        let client = connect_when_ready(&server).await;
        // SERIAL through INSERT, one row and many at a time.
        for _ in 0..5 {
            client
                .execute("INSERT INTO seq_crash (round) VALUES ($1)", &[&round])
                .await
                .unwrap();
        }
        client
            .execute(
                "INSERT INTO seq_crash (round) SELECT $1::int FROM generate_series(1, 70)",
                &[&round],
            )
            .await
            .unwrap();
        // ... and through COPY with the key left out.
        let sink = client
            .copy_in("COPY seq_crash (round) FROM STDIN")
            .await
            .unwrap();
        futures::pin_mut!(sink);
        let data: String = (0..40).map(|_| format!("{round}\n")).collect();
        sink.send(bytes::Bytes::from(data)).await.unwrap();
        sink.finish().await.unwrap();
        rows += 5 + 70 + 40;
        // Plain nextval outside any table.
        for _ in 0..7 {
            let v: i64 = client
                .query_one("SELECT nextval('seq_loose')", &[])
                .await
                .unwrap()
                .get(0);
            assert!(
                handed_out.insert(v),
                "round {round}: nextval gave {v} again"
            );
        }
        let now = ids(&client).await;
        assert_eq!(
            now.len(),
            rows,
            "round {round}: every acknowledged row is there"
        );
        assert_eq!(
            now.iter().collect::<BTreeSet<_>>().len(),
            rows,
            "round {round}: SERIAL keys are distinct"
        );
        server.kill();
        server.restart();
    }
    // setval survives a kill: the next value follows it.
    let client = connect_when_ready(&server).await;
    client
        .query_one("SELECT setval('seq_loose', 5000)", &[])
        .await
        .unwrap();
    server.kill();
    server.restart();
    let client = connect_when_ready(&server).await;
    let v: i64 = client
        .query_one("SELECT nextval('seq_loose')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        v, 5001,
        "setval(5000) then a kill: nextval continues after it"
    );
    let now = ids(&client).await;
    assert_eq!(now.len(), rows);
    let max = *now.last().unwrap();
    let next: i64 = client
        .query_one("INSERT INTO seq_crash (round) VALUES (9) RETURNING id", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        next > max,
        "after the kills the next key {next} is above every key given ({max})"
    );
}
