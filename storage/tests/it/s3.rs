//! The conformance suite against S3 semantics, served by a local moto server
//! (`moto_server` from `$HOME/.cache/weir-venv`, installed by
//! scripts/test-all.sh). Without moto this test fails rather than skipping:
//! create-only puts on S3 (If-None-Match) are what the fence rests on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use weir_storage::testing::{create_bucket, start_moto};

use crate::conformance::{Fixture, run_suite};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_via_moto() {
    let moto = start_moto();
    create_bucket(moto.port, "weir-state").await;
    let endpoint = format!("http://127.0.0.1:{}", moto.port);
    let (store, prefix) = weir_storage::state::store_from_url_with(
        "s3://weir-state/cluster",
        [
            ("aws_endpoint", endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
        ],
    )
    .unwrap();
    assert_eq!(prefix, "cluster");
    let next = AtomicUsize::new(0);
    // One bucket; every case gets its own root prefix.
    run_suite("s3", 200, &|| Fixture {
        store: Arc::clone(&store),
        root: format!("{prefix}/case{}", next.fetch_add(1, Ordering::SeqCst)),
        _dir: None,
    })
    .await;
}
