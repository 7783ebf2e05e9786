//! A fault-injecting `ObjectStore` wrapper for tests: failed calls, calls
//! that take effect but report failure (the lost-acknowledgement case that
//! makes idempotent retries necessary), latency, timeouts and short listings.
//!
//! Faults come from an explicit script (the next operation of a kind gets
//! the next scripted fault) and otherwise from a seeded RNG, so a failing
//! seed replays exactly. Multipart uploads, ranged reads and copies pass
//! through untouched: the state backend does not use them.

use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// The operations faults can be aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Put,
    Get,
    List,
    Delete,
}

/// What happens to one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Fail without touching the store.
    Fail,
    /// Apply the operation, then report failure.
    FailAfter,
    /// Apply the operation after a delay.
    Delay(Duration),
    /// Wait, then fail without applying (a client-side timeout).
    Timeout(Duration),
    /// A listing that silently stops after this many entries.
    TruncateList(usize),
}

/// Random fault rates, each in `0.0..=1.0`, drawn per operation.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    pub seed: u64,
    pub fail_rate: f64,
    /// Puts and deletes only.
    pub fail_after_rate: f64,
    /// Lists only.
    pub truncate_list_rate: f64,
    /// Every operation not failed waits up to this long.
    pub max_delay: Duration,
}

impl FaultConfig {
    /// No random faults; only scripted ones.
    pub fn none() -> Self {
        Self {
            seed: 0,
            fail_rate: 0.0,
            fail_after_rate: 0.0,
            truncate_list_rate: 0.0,
            max_delay: Duration::ZERO,
        }
    }
}

#[derive(Debug)]
struct State {
    config: FaultConfig,
    rng: u64,
    enabled: bool,
    script: VecDeque<(OpKind, Fault)>,
    injected: u64,
}

impl State {
    /// splitmix64: tiny, seedable, good enough to pick faults.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn choose(&mut self, op: OpKind) -> Option<Fault> {
        if let Some(i) = self.script.iter().position(|(k, _)| *k == op) {
            self.injected += 1;
            return self.script.remove(i).map(|(_, f)| f);
        }
        if !self.enabled {
            return None;
        }
        let c = self.config.clone();
        let r = self.unit();
        let fault = if r < c.fail_rate {
            Some(Fault::Fail)
        } else if matches!(op, OpKind::Put | OpKind::Delete) && r < c.fail_rate + c.fail_after_rate
        {
            Some(Fault::FailAfter)
        } else if op == OpKind::List && r < c.fail_rate + c.truncate_list_rate {
            Some(Fault::TruncateList((self.next() % 3) as usize))
        } else if !c.max_delay.is_zero() {
            let nanos = self.next() % (c.max_delay.as_nanos() as u64 + 1);
            return Some(Fault::Delay(Duration::from_nanos(nanos)));
        } else {
            None
        };
        self.injected += u64::from(fault.is_some());
        fault
    }
}

/// An `ObjectStore` that injects faults into the calls of another.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Mutex<State>>,
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "faulty",
        source: format!("injected fault: {what}").into(),
    }
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>, config: FaultConfig) -> Self {
        let rng = config.seed;
        Self {
            inner,
            state: Arc::new(Mutex::new(State {
                config,
                rng,
                enabled: true,
                script: VecDeque::new(),
                injected: 0,
            })),
        }
    }

    /// The next `op` gets `fault` (before any random choice).
    pub fn push(&self, op: OpKind, fault: Fault) {
        self.state.lock().unwrap().script.push_back((op, fault));
    }

    /// Turn random faults on or off (scripted ones always apply).
    pub fn set_enabled(&self, enabled: bool) {
        self.state.lock().unwrap().enabled = enabled;
    }

    /// How many faults (other than delays) have been injected so far.
    pub fn injected(&self) -> u64 {
        self.state.lock().unwrap().injected
    }

    fn choose(&self, op: OpKind) -> Option<Fault> {
        self.state.lock().unwrap().choose(op)
    }

    /// Run `apply` under the fault chosen for `op`.
    async fn around<T, F>(&self, op: OpKind, apply: F) -> object_store::Result<T>
    where
        F: Future<Output = object_store::Result<T>>,
    {
        match self.choose(op) {
            Some(Fault::Fail) => Err(injected("fail")),
            Some(Fault::Timeout(d)) => {
                tokio::time::sleep(d).await;
                Err(injected("timeout"))
            }
            Some(Fault::FailAfter) => {
                apply.await?;
                Err(injected("failed after applying"))
            }
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                apply.await
            }
            Some(Fault::TruncateList(_)) | None => apply.await,
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.around(OpKind::Put, self.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        // Faults hit the request; a body that started streaming is intact.
        self.around(OpKind::Get, self.inner.get_opts(location, options))
            .await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let this = self.clone();
        locations
            .and_then(move |location| {
                let this = this.clone();
                async move {
                    let inner = this.inner.clone();
                    let target = location.clone();
                    this.around(OpKind::Delete, async move { inner.delete(&target).await })
                        .await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.choose(OpKind::List) {
            Some(Fault::Fail | Fault::Timeout(_) | Fault::FailAfter) => {
                futures::stream::once(async { Err(injected("list")) }).boxed()
            }
            Some(Fault::TruncateList(n)) => self.inner.list(prefix).take(n).boxed(),
            Some(Fault::Delay(_)) | None => self.inner.list(prefix),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
